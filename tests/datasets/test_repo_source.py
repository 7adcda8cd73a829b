"""A row's repository from its git source (gitpython, real git): the clone at ``base_commit``
has no later history, whether the base is on the default branch or only on another one."""

from __future__ import annotations

import pytest
from support.upstream import FIX_MARK, git, make_upstream

from coding_agent_rl.images.repo_source import (
    RepoSourceError,
    checkout_at,
    mirror,
    source_url,
)


@pytest.fixture
def upstream(tmp_path, monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    return make_upstream(tmp_path / "mirrors")


def history(repo) -> tuple[list[str], str]:
    return git(repo, "rev-list", "--all").split(), git(repo, "log", "--all", "-p")


def test_base_on_the_default_branch(upstream, tmp_path):
    url = source_url(str(tmp_path / "mirrors" / "{owner}+{name}"), "more-itertools/more-itertools")
    dest = tmp_path / "row"
    assert checkout_at(mirror(url), upstream["base"], dest) == upstream["base"]
    commits, log = history(dest)
    assert upstream["base"] in commits and upstream["fix"] not in commits
    assert FIX_MARK not in log and git(dest, "remote") == ""
    assert git(dest, "tag", "-l").split() == ["v9.0.0"]  # an older tag stays, the later one goes
    assert git(dest, "status", "--porcelain") == ""


def test_base_only_on_another_branch_is_fetched_by_id(upstream, tmp_path):
    path = upstream["path"]
    git(path, "checkout", "-q", "-b", "maint", upstream["base"])
    (tmp_path / "mirrors" / "more-itertools+more-itertools" / "MAINT.md").write_text("maint\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "maintenance")
    side = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    dest = tmp_path / "row"
    assert checkout_at(mirror(path), side, dest) == side
    commits, log = history(dest)
    assert commits[0] == side and upstream["fix"] not in commits and FIX_MARK not in log


def test_errors_name_the_missing_piece(upstream, tmp_path):
    with pytest.raises(RepoSourceError, match="is not in"):
        checkout_at(mirror(upstream["path"]), "0" * 40, tmp_path / "row")
    with pytest.raises(RepoSourceError, match="cannot clone"):
        mirror(str(tmp_path / "nowhere"))
    with pytest.raises(RepoSourceError, match="unknown placeholder"):
        source_url("/srv/{project}", "a/b")

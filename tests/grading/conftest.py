"""Fixtures for grading tests: the bundled example tasks, their images, and diffs made with git."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

# Source fixtures the strict-compare tests stage and run themselves, not tests of this suite.
collect_ignore_glob = ["strict_compare_cases/*"]

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"


def _git(cwd: pathlib.Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        input=input,
    ).stdout


@pytest.fixture
def make_diff(tmp_path):
    """``make_diff(task, {path: text | bytes | None}, gold=False)`` -> a git diff against the
    task's base, as an agent would produce it (None deletes the file)."""

    def make(task: str, edits: dict[str, str | bytes | None], *, gold: bool = False) -> str:
        repo = tmp_path / f"{task}-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(EXAMPLES / task / "repo", repo)
        _git(repo, "init", "-q", "-b", "main")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "base")
        if gold:
            _git(repo, "apply", "-", input=(EXAMPLES / task / "gold.patch").read_text())
        for path, content in edits.items():
            target = repo / path
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        _git(repo, "add", "-A")
        return _git(repo, "diff", "--cached", "--binary")

    return make

"""A row's repository from its git source, set up the way SWE-bench sets up its repositories.

``--repo-source TEMPLATE`` names where each row's repository comes from: a URL or a local path
with ``{repo}`` (``owner/name``), ``{owner}`` and ``{name}`` placeholders, e.g.
``https://github.com/{repo}.git`` or ``/srv/mirrors/{owner}+{name}``. Each source is cloned
once (bare, with gitpython) into ``$CODING_AGENT_RL_CACHE/repos`` and fetched again on later
builds; every row then gets its own clone of it at ``base_commit``:

single-branch clone, ``reset --hard base_commit``, remote removed, every other ref deleted (tags
included unless they are ancestors of the base), reflog expired, ``gc --prune=now``: no commit
after ``base_commit`` is reachable in the image, and a check says so before the image is built.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import threading

import git

from coding_agent_rl import settings
from coding_agent_rl.errors import CodingAgentRLError

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
_FRESH: set[str] = set()  # sources cloned or fetched by this process
_ENV = {  # fixed identity: the clone never commits, but hooks and config must not matter
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
}


class RepoSourceError(CodingAgentRLError, RuntimeError):
    """The repository (or its base commit) cannot be had from the source."""

    default_stage = "images"


def cache_dir() -> pathlib.Path:
    root = settings.current().cache_root
    return pathlib.Path(root) / "repos"


def source_url(template: str, repo: str) -> str:
    """``template`` with the row's repository filled in (``{repo}``, ``{owner}``, ``{name}``)."""
    owner, _, name = repo.partition("/")
    if not owner or not name:
        raise RepoSourceError(f"repo {repo!r} is not 'owner/name'")
    try:
        return template.format(repo=repo, owner=owner, name=name)
    except (KeyError, IndexError, ValueError) as e:
        raise RepoSourceError(
            f"--repo-source {template!r}: unknown placeholder {e} (use {{repo}}, {{owner}}, "
            "{name})"
        ) from None


def _lock(key: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def mirror(url: str, *, refresh: bool = True) -> pathlib.Path:
    """A bare clone of ``url`` in the cache (fetched again when ``refresh``); thread-safe."""
    path = cache_dir() / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".git")
    with _lock(str(path)):
        try:
            if not (path / "HEAD").exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
                git.Repo.clone_from(url, tmp, bare=True, env=_ENV)
                with git.Repo(tmp) as r:
                    # Lets a row's clone fetch a base commit that no branch tip reaches.
                    r.git.config("uploadpack.allowAnySHA1InWant", "true")
                    r.git.config("remote.origin.fetch", "+refs/*:refs/*")
                tmp.rename(path)
            elif refresh and url not in _FRESH:  # once per process: many rows share a source
                with git.Repo(path) as r:
                    r.git.fetch("--quiet", "--prune", "origin", env=_ENV)
            _FRESH.add(url)
        except git.GitCommandError as e:
            raise RepoSourceError(f"cannot clone {url}: {_stderr(e)}") from None
    return path


def _stderr(e: git.GitCommandError) -> str:
    text = (e.stderr or str(e)).strip().replace("stderr: ", "")
    lines = [ln.strip(" '") for ln in text.splitlines() if ln.strip(" '")]
    return lines[-1] if lines else f"git exited {e.status}"


def checkout_at(
    source: pathlib.Path, base_commit: str, dest: pathlib.Path, *, single_branch: bool = True
) -> str:
    """Clone ``source`` into ``dest`` at ``base_commit`` with no later history; returns the
    full commit id. Raises :class:`RepoSourceError` naming what is missing."""
    try:
        repo = git.Repo.clone_from(
            str(source), dest, no_checkout=True, single_branch=single_branch, env=_ENV
        )
    except git.GitCommandError as e:
        raise RepoSourceError(f"cannot clone {source}: {_stderr(e)}") from None
    with repo:
        g = repo.git
        try:
            base = g.rev_parse("--verify", "-q", f"{base_commit}^{{commit}}")
        except git.GitCommandError:
            try:  # not on the cloned branch: fetch exactly that commit
                g.fetch("--quiet", "origin", base_commit)
                base = g.rev_parse("--verify", f"{base_commit}^{{commit}}")
            except git.GitCommandError:
                raise RepoSourceError(f"base_commit {base_commit} is not in {source}") from None
        g.reset("--hard", "-q", base)
        g.remote("remove", "origin")
        ancestors = set(g.rev_list(base).split())
        for line in g.for_each_ref("--format=%(objectname) %(*objectname) %(refname)").splitlines():
            oid, peeled, ref = line.split(" ")
            keep = ref.startswith("refs/tags/") and (peeled or oid) in ancestors
            if ref != repo.head.ref.path and not keep:
                g.update_ref("-d", ref)
        g.reflog("expire", "--expire=now", "--all")
        g.gc("-q", "--prune=now")
        extra = g.rev_list("--all", "--not", base).split()
        if extra:
            raise RepoSourceError(f"commits after {base} still reachable: {extra[:3]}")
    # What the install leaves in the tree (``*.egg-info``) becomes part of the task's base
    # snapshot (grading/workspace.py), identical in the agent's and the grader's sandbox.
    return base

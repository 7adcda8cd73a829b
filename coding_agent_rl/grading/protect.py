"""Which paths the agent's diff may not change when it is graded.

Test files and what could shadow them, ``conftest.py``, runner configuration, start-up hooks,
plugin metadata, bytecode, the runner's own modules, ``.gitattributes``, the harness's files and
the row's ``protected_paths``. Why each: docs/modules/grading.md.
"""

from __future__ import annotations

import posixpath

from coding_agent_rl.datasets.schema import TaskRow

DEFAULT_PROTECTED = (
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
    "*.egg-info/",
    "*.dist-info/",
    "entry_points.txt",
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    "/pytest.py",
    "/pytest/",
    "/_pytest/",
    "/pluggy.py",
    "/pluggy/",
    "/py.py",
    ".gitattributes",
    ".git",  # the repository's git dir (or a .git file) at any depth: its config runs commands
    "/.harness/",
    "/PROBLEM_STATEMENT.md",
)


def _anchor(path: str) -> str:
    """A row path as an anchored glob (special characters escaped)."""
    escaped = "".join(f"[{c}]" if c in "*?[" else c for c in path.lstrip("/"))
    return "/" + escaped


def test_file_patterns(test_files: tuple[str, ...]) -> list[str]:
    """Each test file, what could shadow it at import time, and its directory's __init__.py."""
    out: list[str] = []
    for f in test_files:
        out.append(_anchor(f))
        head, name = posixpath.split(f.lstrip("/"))
        stem = name.rsplit(".", 1)[0] if "." in name else name
        base = f"{head}/{stem}" if head else stem
        out.append(_anchor(base) + ".*")
        out.append(_anchor(base) + "/")
        out.append(_anchor(f"{head}/__init__.py" if head else "__init__.py"))
    return out


def protected_patterns(row: TaskRow, *, extra: tuple[str, ...] = ()) -> list[str]:
    """All globs the grader refuses to take from the agent's diff for ``row``."""
    patterns = list(DEFAULT_PROTECTED)
    patterns += test_file_patterns(row.test_files)
    if row.grader == "harbor":  # Harbor's verifier dirs, when they lie inside the workdir
        for d in ("/tests", "/logs"):
            if row.workdir == "/" or d.startswith(row.workdir.rstrip("/") + "/"):
                patterns.append(_anchor(d[len(row.workdir.rstrip("/")) :]) + "/")
    patterns += list(row.protected_paths) + list(extra)
    return list(dict.fromkeys(patterns))

"""Which paths the agent's diff may not change when it is graded.

Defaults, each closing a known reward hack (whole files are protected; a legitimate fix that
needs to edit one of them is dropped, which is the accepted price):

- the task's test files (``test_files``), plus anything that could shadow one at import time: a
  sibling ``<stem>.*`` (an extension module ``test_x.cpython-311-x86_64-linux-gnu.so`` beats
  ``test_x.py``), a package directory ``<stem>/``, the directory's ``__init__.py``;
- ``conftest.py`` anywhere (a hook that rewrites reports to PASSED);
- test-runner configuration: ``pytest.ini``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``,
  ``.pytest.ini`` (``addopts = -p plugin``, ``python_files``, ``testpaths``) — whole files;
- interpreter start-up hooks: ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``;
- package metadata that registers pytest plugins (``*.egg-info/``, ``*.dist-info/``,
  ``entry_points.txt``);
- stale bytecode (``__pycache__/``, ``*.pyc``; an "unchecked-hash" pyc is used without its source);
- the test runner's own modules at the repository root (``pytest.py``, ``pytest/``,
  ``_pytest/``, ``pluggy``, ``py.py``): ``python -m pytest`` puts the workdir first on
  ``sys.path``, so a fake ``pytest.py`` there would print any summary it likes;
- ``.gitattributes`` (it steers how the grader's own ``git checkout`` rewrites test files);
- the harness's and grader's own files (``.harness/``, ``PROBLEM_STATEMENT.md``);
- plus the row's ``protected_paths`` globs.

Not covered here: the code under test runs inside the test process, so library code that
monkeypatches the runner, or a new module that shadows a not-yet-imported module, could forge
results despite these paths. The other layers handle that (see the package docstring): the
grader's plugin and its result channel, canaries, the exit-status check, the static screen, safe
path and the new-module rule.
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

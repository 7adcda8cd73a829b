"""Small real-world-shaped upstream repositories the tests create, and SWE-bench rows for them.

``make_upstream(root)`` writes ``root/more-itertools+more-itertools``: a src-layout package named
``more_itertools`` (the name Debian's python3-pytest also installs, so only an isolated venv
tests the repository rather than the system copy), with a history that goes on past the task's
base commit: the fix, its test, a tag and a release branch all come later. ``swebench_record``
is the SWE-bench row for that bug (all SWE-bench fields, F2P / P2P as the base measures them).
"""

from __future__ import annotations

import json
import pathlib
import subprocess

REPO = "more-itertools/more-itertools"
SOURCE_TEMPLATE = "{root}/{{owner}}+{{name}}"
FIX_MARK = "CAR-FUTURE-FIX-7f3a"  # appears only in commits after the base

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "more-itertools"
version = "10.0.0"
requires-python = ">=3.8"

[project.optional-dependencies]
test = ["iniconfig"]

[tool.setuptools.packages.find]
where = ["src"]
"""

BUGGY = '''"""Tiny more-itertools."""


def chunked(iterable, n):
    """Break ``iterable`` into lists of length ``n`` (the last one may be shorter)."""
    items = list(iterable)
    return [items[i : i + n] for i in range(0, len(items) - n + 1, n)]


def first(iterable, default=None):
    return next(iter(iterable), default)
'''

FIXED = BUGGY.replace("range(0, len(items) - n + 1, n)]", "range(0, len(items), n)]  # " + FIX_MARK)

TESTS = """import more_itertools
from more_itertools import chunked, first


def test_imports_the_repository():
    assert "/site-packages/" not in more_itertools.__file__, more_itertools.__file__
    assert more_itertools.__file__.startswith("/testbed/src/")


def test_chunked_even():
    assert chunked([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


def test_first():
    assert first([], "x") == "x" and first([5]) == 5
"""

NEW_TEST = """

def test_chunked_keeps_the_short_tail():
    assert chunked([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
"""


def git(cwd: pathlib.Path, *args: str, date: str | None = None) -> str:
    env = {
        "GIT_AUTHOR_NAME": "Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.invalid",
        "GIT_COMMITTER_NAME": "Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.invalid",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(cwd),
    }
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_upstream(root: pathlib.Path) -> dict[str, str]:
    """The upstream repository under ``root``; returns {'base': ..., 'fix': ..., 'path': ...}."""
    path = root / "more-itertools+more-itertools"
    (path / "src" / "more_itertools").mkdir(parents=True)
    (path / "tests").mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / "README.md").write_text("# more-itertools (test copy)\n")
    (path / "src" / "more_itertools" / "__init__.py").write_text(BUGGY.replace("first", "head"))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "Initial import", date="2024-01-01T00:00:00Z")
    git(path, "tag", "v9.0.0")
    (path / "src" / "more_itertools" / "__init__.py").write_text(BUGGY)
    (path / "tests" / "test_more.py").write_text(TESTS)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "Rename head() to first(); add tests", date="2024-02-01T00:00:00Z")
    base = git(path, "rev-parse", "HEAD")
    # The future: the fix (with a marker only it carries), its test, a tag, a release branch.
    (path / "src" / "more_itertools" / "__init__.py").write_text(FIXED)
    git(
        path,
        "commit",
        "-qam",
        f"Fix chunked() dropping the tail ({FIX_MARK})",
        date="2024-03-01T00:00:00Z",
    )
    fix = git(path, "rev-parse", "HEAD")
    with (path / "tests" / "test_more.py").open("a") as f:
        f.write(NEW_TEST)
    git(path, "commit", "-qam", "Test the short tail", date="2024-03-02T00:00:00Z")
    git(path, "tag", "-a", "v10.0.0", "-m", f"release with {FIX_MARK}")
    git(path, "branch", "release-10", fix)
    # As SWE-bench derives them from the pull request: the fix and the test change.
    gold = git(path, "diff", base, fix, "--", "src") + "\n"
    test_patch = git(path, "diff", fix, "HEAD", "--", "tests") + "\n"
    return {"base": base, "fix": fix, "path": str(path), "gold": gold, "test_patch": test_patch}


def swebench_record(
    upstream: dict[str, str], instance_id: str = "more-itertools__more-itertools-101"
) -> dict:
    """The task as a SWE-bench row (the HF export's field names and JSON-string test lists)."""
    base = upstream["base"]
    return {
        "repo": REPO,
        "instance_id": instance_id,
        "base_commit": base,
        "patch": upstream["gold"].replace(f"  # {FIX_MARK}", ""),
        "test_patch": upstream["test_patch"],
        "problem_statement": "chunked() drops the last, shorter chunk\n\n"
        "`chunked([1, 2, 3, 4, 5], 2)` returns `[[1, 2], [3, 4]]`; the docs say the last "
        "chunk may be shorter, so it should be `[[1, 2], [3, 4], [5]]`.\n",
        "hints_text": "",
        "created_at": "2024-02-15T10:00:00Z",
        "version": "10.0",
        "FAIL_TO_PASS": json.dumps(["tests/test_more.py::test_chunked_keeps_the_short_tail"]),
        "PASS_TO_PASS": json.dumps(
            [
                "tests/test_more.py::test_imports_the_repository",
                "tests/test_more.py::test_chunked_even",
                "tests/test_more.py::test_first",
            ]
        ),
        "environment_setup_commit": base,
    }


def search_future(fix: str, workdir: str = "/testbed") -> str:
    """A shell script that looks for the future the way agents do (``log --all``, reflog,
    ``fsck --lost-found``, ``cat-file`` on a known future hash, packed-refs, FETCH_HEAD, tags,
    remotes, stash, every object in the store, submodules). It prints ``FOUND <probe>`` for
    each hit and ``SEARCHED`` at the end; the future hash itself is never printed."""
    return f"""cd {workdir}
probe() {{ if eval "$2" 2>/dev/null | grep -q -e {FIX_MARK} -e {fix}; then echo "FOUND $1"; fi; }}
probe log-all 'git log --all -p --format="%H %s %b"'
probe reflog 'git reflog --all --format="%H %s"'
probe lost-found 'git fsck --lost-found --no-reflogs --full; for f in .git/lost-found/*/*; do git cat-file -p "$(basename "$f")"; done'
probe all-objects 'git cat-file --batch-all-objects --batch-check="%(objectname)" | git cat-file --batch'
probe refs 'git for-each-ref --format="%(objectname) %(refname) %(contents)"; git tag -l -n9; git branch -a -v'
probe files 'cat .git/packed-refs .git/FETCH_HEAD .git/ORIG_HEAD .git/logs/HEAD .git/COMMIT_EDITMSG'
probe stash 'git stash list -p'
probe remotes 'git remote -v; git ls-remote origin'
probe submodules 'git submodule foreach --recursive "git log --all -p; git cat-file --batch-all-objects --batch-check=%\\(objectname\\) | git cat-file --batch"'
if git cat-file -e {fix} 2>/dev/null; then echo "FOUND cat-file-future-hash"; fi
echo SEARCHED
"""

"""Which dunders a gold patch writes, read from real ``git diff`` output (no Docker)."""

from __future__ import annotations

import pathlib
import random
import subprocess

import pytest

from coding_agent_rl.grading.gold_equality import (
    _hunks,
    _sides,
    gold_dunders,
    gold_py_sources,
    own_pairs,
)
from coding_agent_rl.patches.files import lines_of, split_patch

BASE = """import functools


class V:
    def __init__(self, s):
        self.s = s

    def __eq__(self, other):
        return self.s == other.s

    def render(self):
        return self.s


def helper():
    class Local:
        def __lt__(self, other):
            return False

    return Local
"""


def _diff(tmp: pathlib.Path, files: dict[str, str | None], base: str = BASE) -> str:
    def git(*a: str) -> str:
        run = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *a]
        return subprocess.run(run, cwd=tmp, check=True, capture_output=True, text=True).stdout

    if not (tmp / ".git").exists():
        (tmp / "v.py").write_text(base)
        git("init", "-q")
        git("add", "-A")
        git("commit", "-qm", "base")
    for path, text in files.items():
        if text is None:
            (tmp / path).unlink()
        else:
            (tmp / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp / path).write_text(text)
    git("add", "-A")
    return git("diff", "--cached")


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (BASE.replace("self.s == other.s", "self.s.lower() == other.s.lower()"), ["V.__eq__"]),
        (
            BASE.replace(
                "    def render",
                "    __hash__ = None\n\n    def __hash__(self):\n        return 1\n\n    def render",
            ),
            ["V.__hash__"],
        ),
        (BASE.replace("return self.s\n", "return self.s.upper()\n"), []),
        (BASE.replace("return False", "return True"), ["helper.<locals>.Local.__lt__"]),
        (
            BASE.replace("    def __eq__(self, other):\n        return self.s == other.s\n\n", ""),
            ["V.__eq__"],
        ),
        (
            BASE.replace("    def __eq__", "    @functools.total_ordering\n    def __eq__"),
            ["V.__eq__"],
        ),
    ],
    ids=["body", "added", "not-a-dunder", "local-class", "removed", "decorator"],
)
def test_the_dunders_a_change_writes(tmp_path, new, expected):
    diff = _diff(tmp_path, {"v.py": new})
    assert gold_dunders(diff, {"v.py": BASE}).get("v.py", []) == expected


def test_a_new_file_and_the_paths_to_read(tmp_path):
    nested = "class A:\n    class B:\n        def __eq__(self, o):\n            return True\n"
    diff = _diff(tmp_path, {"pkg/n.py": nested, "tests/test_v.py": "def test(): pass\n"})
    assert gold_dunders(diff, {}) == {"pkg/n.py": ["A.B.__eq__"]}
    assert gold_py_sources(diff, ["tests/test_v.py"]) == []  # new files have no base to read
    (tmp_path / "b").mkdir()
    diff = _diff(tmp_path / "b", {"v.py": BASE.replace("other.s", "other.t")})
    assert gold_py_sources(diff, ("tests/test_v.py",)) == ["v.py"]
    assert own_pairs(gold_dunders(diff, {"v.py": BASE})) == [
        ["v.py", "V.__eq__"],
        ["v.py", "V.__hash__"],
    ]


def test_a_base_that_does_not_parse_or_a_garbage_patch_names_nothing(tmp_path):
    diff = _diff(tmp_path, {"v.py": BASE.replace("other.s", "other.t")})
    assert gold_dunders(diff, {"v.py": "def (:\n" + BASE}) == {}
    assert gold_dunders("not a patch\n@@ -x @@\n", {}) == {}
    assert gold_dunders("", {}) == {}


def test_the_post_image_is_exactly_what_git_wrote(tmp_path):
    rng = random.Random(7)
    base = [f"line {i}\n" for i in range(200)]
    for _ in range(40):
        lines = list(base)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(lines) + 1)
            if rng.random() < 0.5 and at < len(lines):
                del lines[at : at + rng.randint(1, 4)]
            else:
                lines[at:at] = [f"new {rng.random()}\n"] * rng.randint(1, 3)
        diff = _diff(tmp_path, {"v.py": "".join(lines)}, base="".join(base))
        (fp,) = split_patch(diff)
        post, _, _ = _sides(lines_of("".join(base)), _hunks(fp))
        assert post == "".join(lines)
        _diff(tmp_path, {"v.py": "".join(base)})

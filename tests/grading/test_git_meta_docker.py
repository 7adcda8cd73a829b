"""A diff that writes the repository's git metadata (``.git/config``, ``.git/info/attributes``)
would make the grader's own root ``git`` run its code: a smudge filter runs during the reset of
the test files. Two defences: diff sections under any ``.git`` path are dropped on the host, and
``.git``'s metadata is put back from a copy taken before the diff, right after it applied (a diff
can reach ``.git`` through a symlink it creates, which no path filter sees)."""

from __future__ import annotations

import pytest

from coding_agent_rl.grading import after_apply, protect
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import grade

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

# The smudge filter appends root's uid to a file the agent's own exit hook prints.
SMUDGE = '[filter "car"]\n\tsmudge = "sh -c \'id -u >> /testbed/textkit/m.txt; cat\'"\n'
HOOK = (
    "import atexit, os\n"
    "atexit.register(lambda: print('MARK:', os.path.exists('/testbed/textkit/m.txt')"
    " and open('/testbed/textkit/m.txt').read().split()))\n"
)


def _new(path: str, text: str, mode: str = "100644", eol: bool = True) -> str:
    lines = text.splitlines()
    out = f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n"
    out += f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{ln}\n" for ln in lines)
    return out if eol else out + "\\ No newline at end of file\n"


def _edit(path: str, text: str) -> str:
    lines = text.splitlines()
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{ln}\n" for ln in lines)
    )


def _diff(row, via: str) -> str:
    init = (row.build.context / "repo" / "textkit" / "__init__.py").read_text()
    n = len(init.splitlines())
    hook = (
        "diff --git a/textkit/__init__.py b/textkit/__init__.py\n"
        "--- a/textkit/__init__.py\n+++ b/textkit/__init__.py\n"
        f"@@ -{n},0 +{n + 1},{len(HOOK.splitlines())} @@\n"
        + "".join(f"+{ln}\n" for ln in HOOK.splitlines())
    )
    if via == "path":
        return hook + _new(".git/info/attributes", "* filter=car") + _edit(".git/config", SMUDGE)
    # through a symlink the diff creates: no path in the diff names .git
    link = _new("gl", ".git", mode="120000", eol=False)
    return hook + link + _new("gl/info/attributes", "* filter=car") + _edit("gl/config", SMUDGE)


async def _root_ran(row, via: str) -> bool:
    result = await grade(row, _diff(row, via), defences=Defences(tamper_policy="off"))
    marks = [ln for ln in result.test_log.splitlines() if ln.startswith("MARK:")]
    assert marks, result.test_log[-2000:]  # the agent's hook printed what it saw
    return "'0'" in marks[0]


@pytest.mark.parametrize("via", ["path", "symlink"])
async def test_git_metadata_from_the_diff_never_runs_as_root(example_rows, via, monkeypatch):
    row = example_rows["slugify"]
    assert not await _root_ran(row, via)  # both defences on
    # Path filter alone: the symlink reaches .git anyway.
    monkeypatch.setattr(after_apply, "restore_git_meta", lambda src: "")
    assert await _root_ran(row, via) == (via == "symlink")
    # Both off: root ran the diff's filter either way.
    bare = tuple(p for p in protect.DEFAULT_PROTECTED if p != ".git")
    monkeypatch.setattr(protect, "DEFAULT_PROTECTED", bare)
    assert await _root_ran(row, via)

"""A diff that breaks a grading step after it applied, through the real grading path in Docker.

Infra samples are dropped from training, so a policy that is losing would rather its sample be
infra than a 0. The reset after the diff (test files back to the base, the hidden test patch,
the canary files) is the grader's own step; a diff that makes it fail used to be written off as
infra. A control reset in a fresh sandbox without the diff now decides: it works there, so the
diff is at fault (model). The attack: a new ``.git/index.lock`` (written through a symlink the diff
creates: ``.git`` paths themselves are dropped on the host, ``patch --fuzz`` follows the link), so the reset's ``git checkout`` of the test files cannot
take the index. New instances of the class it was not designed around: a corrupt
``.git/packed-refs`` (git cannot resolve anything: the reset's ``cat-file`` fails), a full
disk (the reset cannot write the hidden tests), and code that kills the test runner before
collection (the test stage's control).
"""

from __future__ import annotations

import dataclasses

import pytest

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox
from coding_agent_rl.grading.workspace import run_checked

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]


def new_file(path: str, text: str) -> str:
    """A diff section creating ``path``, written by hand (git never tracks ``.git/``)."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


# ``.git/`` paths are dropped on the host; a symlink the diff creates still reaches the git dir.
LINK = (
    "diff --git a/gl b/gl\nnew file mode 120000\n--- /dev/null\n+++ b/gl\n@@ -0,0 +1 @@\n"
    "+.git\n\\ No newline at end of file\n"
)
GIT_BREAKERS = {
    "index.lock": LINK + new_file("gl/index.lock", "held"),
    "packed-refs": LINK + new_file("gl/packed-refs", "not a ref line"),
}


@pytest.mark.parametrize("breaker", sorted(GIT_BREAKERS))
async def test_diff_that_breaks_git_for_the_reset(example_rows, breaker):
    row = example_rows["slugify"]
    diff = GIT_BREAKERS[breaker]

    # Defence off: the grader's own reset fails and the sample is written off as infra (dropped
    # from training: the policy escapes its 0).
    off = await grade(row, diff, defences=Defences(reset_control=False))
    assert (off.reward, off.failure_kind) == (0.0, "infra"), off.reason
    assert off.reason.startswith("AfterApplyError: after applying the patch")  # the diff went in
    assert off.control is None

    on = await grade(row, diff)
    assert (on.reward, on.failure_kind) == (0.0, "model"), on.reason
    assert on.control == "fresh sandbox: the reset works"
    assert on.grader_error is not None and on.grader_error["stage"] == "reset"
    assert on.grader_error["type"] in ("AfterApplyError", "WorkspaceError")


async def test_diff_that_fills_the_disk_before_the_reset(example_rows, make_diff):
    # Hidden tests that bring a 2 MiB data file: the reset needs megabytes, the apply beside its
    # blob only the patch file and a few lists, so the diff can leave a wide gap between (a fixed
    # margin between the two small needs of the bare task broke when either grew).
    fixture = "".join(f"line {i:07d} of the hidden fixture\n" for i in range(64 * 1024))
    slugify = example_rows["slugify"]
    row = dataclasses.replace(
        slugify,
        resources={"disk": "48m"},
        test_patch=slugify.test_patch + new_file("tests/data/fixture.txt", fixture),
    )
    async with GradingSandbox(row) as probe:  # what the capped disk has free before the diff,
        prepared = await probe.ready()  # and what the reset takes of it (measured, not guessed)
        avail = f"df -B1 --output=avail {row.workdir} | tail -1"
        free = int((await prepared.sb.exec(avail)).stdout)
        await run_checked(prepared.sb, prepared.reset_script(row, []), "the probe's reset")
        need = free - int((await prepared.sb.exec(avail)).stdout)
    assert need > len(fixture) // 2, need  # megabytes (the bundle it unpacks is freed again)
    # Leave half of what the reset takes: the apply needs the patch file (well under a quarter).
    diff = make_diff("slugify", {"textkit/blob.bin": bytes(free - need // 2)})
    assert len(diff) < need // 4, (len(diff), need)

    off = await grade(row, diff, defences=Defences(reset_control=False))
    assert (off.reward, off.failure_kind) == (0.0, "infra"), off.reason
    assert "No space left on device" in off.reason
    assert off.reason.startswith("AfterApplyError: after applying the patch")  # the diff went in

    on = await grade(row, diff)
    assert (on.reward, on.failure_kind) == (0.0, "model"), on.reason
    assert on.control == "fresh sandbox: the reset works"


async def test_code_that_kills_the_runner_before_collection(example_rows, make_diff):
    row = example_rows["slugify"]
    init = (row.build.context / "repo" / "textkit" / "__init__.py").read_text()
    diff = make_diff(
        "slugify", {"textkit/__init__.py": "import os\nos.kill(os.getpid(), 9)\n" + init}
    )
    result = await grade(row, diff)
    assert (result.reward, result.failure_kind) == (0.0, "model"), result.reason
    assert result.control == "fresh sandbox: a result"


async def test_diff_that_leaves_no_room_for_the_eval_script(example_rows, make_diff):
    # slime's f2p_script rows: the grader's script file must not be written after the diff went
    # in, where a diff that fills the disk makes the write fail (an infra sample); it rides in
    # the bundle unpacked by the reset, whose failure the control run settles.
    padding = "".join(f"# padding line {i:07d} of the task's script\n" for i in range(96 * 1024))
    script = "import sys, pytest\nsys.exit(pytest.main(['-q', 'tests']))\n" + padding
    row = dataclasses.replace(
        example_rows["slugify"],
        resources={"disk": "48m"},
        fail_to_pass=(),
        pass_to_pass=(),
        eval_script=script,
    )
    assert row.grader == "eval_cmd"
    async with GradingSandbox(row) as probe:
        prepared = await probe.ready()
        df = await prepared.sb.exec(f"df -B1 --output=avail {row.workdir} | tail -1")
    # Half the script's size left after the blob: the apply and the reset of the bare task
    # need a few hundred KiB, the script megabytes.
    diff = make_diff("slugify", {"textkit/blob.bin": bytes(int(df.stdout) - len(script) // 2)})
    result = await grade(row, diff)
    assert (result.reward, result.failure_kind) == (0.0, "model"), result.reason
    assert result.control == "fresh sandbox: the reset works"

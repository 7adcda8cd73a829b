"""Attack classes 3 and 6 (diff side), through the real grading path in Docker.

Class 3 — poisoning the control run: the agent's code hangs the tests (so the grader cannot tell
at once whose failure it is) *and* breaks what a control run would need, here by deleting the
hidden tests' directory as the test user. A control run in the same sandbox (the old way, after
reverting only the agent's own paths) then fails too and the rollout is written off as infra;
the control run in a fresh sandbox scores it as the model's failure.

Class 6 — a small binary diff that inflates to far more than it weighs: refused on the host, before
any sandbox, as the model's failure; without the check the grading sandbox really writes it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import textwrap
import time

import pytest

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]

POISON = textwrap.dedent("""
    import os as _os, shutil as _shutil, time as _time

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _shutil.rmtree(_os.path.join(_here, "..", "tests"), ignore_errors=True)
    _time.sleep(3600)
""")


@pytest.mark.parametrize("method", ["plugin", "log"])
async def test_poisoned_control_run(example_rows, make_diff, method):
    row = dataclasses.replace(example_rows["slugify"], test_timeout=8.0)
    init = (row.build.context / "repo" / "textkit" / "__init__.py").read_text()
    diff = make_diff("slugify", {"textkit/__init__.py": init + POISON})
    base = Defences(plugin=method == "plugin")
    in_place = await grade(row, diff, defences=dataclasses.replace(base, fresh_control=False))
    assert in_place.failure_kind == "infra", in_place.reason  # the poison worked
    assert "also without the agent's changes" in in_place.reason
    assert in_place.control == "same sandbox: no result either"

    fresh = await grade(row, diff, defences=base)
    assert (fresh.reward, fresh.failure_kind) == (0.0, "model"), fresh.reason
    assert fresh.timed_out and "diff is at fault" in fresh.reason
    assert fresh.control == "fresh sandbox: a result"


async def test_binary_diff_that_inflates(example_rows, make_diff):
    row = example_rows["slugify"]
    size = 80 * 2**20
    diff = make_diff("slugify", {"textkit/blob.bin": bytes(size)}, gold=True)
    assert len(diff) < 512 * 1024  # zeros compress: well under the 2 MiB diff cap

    refused = await grade(row, diff)
    assert (refused.reward, refused.failure_kind) == (0.0, "model")
    assert refused.reason == "diff expands to 80.0 MiB, over the 64 MiB cap"

    # Without the check the grading sandbox writes all of it (and the fix still scores).
    t0 = time.monotonic()
    async with GradingSandbox(row, defences=Defences(expansion_cap=None)) as ahead:
        created_s = time.monotonic() - t0
        result = await grade(row, diff, sandbox=ahead)
        written = await ahead.sandbox.exec("stat -c %s /testbed/textkit/blob.bin")
    assert result.reward == 1.0, result.reason
    assert int(written.stdout) == size
    # Decided on the host: the refusal took less than creating the sandbox it did not need.
    assert refused.duration_s < created_s, (refused.duration_s, created_s)


def test_git_binary_delta_is_bounded_by_its_target(tmp_path):
    """A delta hunk declares the delta's size; what it writes is in the delta's own header."""
    from coding_agent_rl.grading.expansion import expanded_size

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    git("init", "-q")
    blob = bytes(range(256)) * 4096  # 1 MiB, not compressible to nothing
    (tmp_path / "data.bin").write_bytes(blob)
    git("add", "-A")
    git("commit", "-qm", "base")
    (tmp_path / "data.bin").write_bytes(blob * 3)  # a delta: three copies of the base
    git("add", "-A")
    patch = git("diff", "--cached", "--binary")
    assert "\ndelta " in patch and len(patch) < 64 * 1024
    assert expanded_size(patch) == 3 * len(blob)


async def test_code_under_test_that_floods_the_log(example_rows, make_diff):
    """Output printed by the code under test (pytest shows it for each failing test): the grader
    keeps a capped tail, not all of it."""
    row = example_rows["slugify"]
    slug = (row.build.context / "repo" / "textkit" / "slug.py").read_text()
    flood = slug.replace('    """\n    text =', '    """\n    print("x" * 2**24)\n    text =', 1)
    assert flood != slug
    diff = make_diff("slugify", {"textkit/slug.py": flood})
    async with GradingSandbox(row) as ahead:
        result = await grade(row, diff, sandbox=ahead)
        prepared = await ahead.ready()
        whole = await ahead.sandbox.read_file(f"{prepared.runner.dir}/log", binary=True)
    assert (result.reward, result.failure_kind) == (0.0, "model")
    assert result.test_log_bytes == len(whole) > 48 * 2**20  # round 1 read all of this
    assert len(result.test_log) <= 70 * 1024 and "characters dropped" in result.test_log

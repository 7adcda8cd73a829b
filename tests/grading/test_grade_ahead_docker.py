"""A grading sandbox prepared before the diff exists (GradingSandbox): same verdicts as grade()'s
own sandbox, one diff each, destroyed on every path (cancelled preparation, failed preparation)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import uuid

import pytest

from coding_agent_rl.grading.grade import GradingSandbox, grade

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]
RUN_ID = f"grade-ahead-tests-{uuid.uuid4().hex[:8]}"
OPTS = {"run_id": RUN_ID}


def containers() -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=coding-agent-rl.run={RUN_ID}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    assert containers() == [], "a grading sandbox was left behind"


async def test_prepared_ahead_grades_like_a_fresh_sandbox(example_rows, make_diff):
    row = example_rows["slugify"]
    async with GradingSandbox(row, sandbox_options=OPTS) as ahead:
        ahead.start()
        prepared = await ahead.ready()
        assert ahead.ready_at is not None and ahead.prepare_s > 0
        assert len(containers()) == 1
        # Grading runs with the network off, whatever the agent sandbox had.
        assert (await prepared.sb.exec("cat /sys/class/net/eth0/address")).exit_code != 0
        gold = await grade(row, row.patch, sandbox=ahead)
        assert (gold.reward, gold.failure_kind, gold.apply_method) == (1.0, None, "git apply")
        with pytest.raises(ValueError, match="one diff"):
            await grade(row, row.patch, sandbox=ahead)
    assert containers() == []

    # A model failure (an edited visible test is reset) is scored the same both ways.
    hack = make_diff("slugify", {"tests/test_textkit.py": "def test_nothing():\n    pass\n"})
    fresh = await grade(row, hack, sandbox_options=OPTS)
    async with GradingSandbox(row, sandbox_options=OPTS) as ahead:
        early = await grade(row, hack, sandbox=ahead.start())
    assert (early.reward, early.failure_kind, early.reason) == (
        fresh.reward,
        fresh.failure_kind,
        fresh.reason,
    )
    assert early.reward == 0.0 and early.tests == fresh.tests


async def test_another_rows_sandbox_is_refused(example_rows):
    async with GradingSandbox(example_rows["pager"], sandbox_options=OPTS) as ahead:
        with pytest.raises(ValueError, match="its own row"):
            await grade(example_rows["slugify"], example_rows["slugify"].patch, sandbox=ahead)


async def test_closing_during_creation_or_preparation_leaves_nothing(example_rows):
    row = example_rows["money"]
    for delay in (0.0, 0.3, 1.0):
        ahead = GradingSandbox(row, sandbox_options=OPTS).start()
        await asyncio.sleep(delay)
        await ahead.close()
        assert containers() == [], f"left behind when closed after {delay}s"
        await ahead.close()  # idempotent


async def test_a_failed_preparation_is_an_infra_result(example_rows):
    row = dataclasses.replace(
        example_rows["money"], pre_commands=("echo broken setup >&2", "exit 3")
    )
    async with GradingSandbox(row, sandbox_options=OPTS) as ahead:
        ahead.start()
        await asyncio.sleep(0.5)  # the failure happens before anyone waits for it
        result = await grade(row, row.patch, sandbox=ahead)
    assert (result.reward, result.failure_kind) == (0.0, "infra")
    assert "pre_commands failed" in result.reason and "broken setup" in result.reason


class Recorded:
    """Wraps the real grading sandbox and records its execs; with ``plant``, the apply exec also
    creates a protected file the diff does not name (a stand-in for a patch tool writing
    through a symlink)."""

    def __init__(self, sb, *, plant: bool):
        self.sb, self.plant, self.execs = sb, plant, []

    async def exec(self, cmd, **kw):
        self.execs.append(cmd)
        if self.plant and "CAR-APPLIED" in cmd:
            cmd = cmd.replace(
                "set -uo pipefail\n", "set -uo pipefail\ntouch /testbed/conftest.py\n"
            )
        return await self.sb.exec(cmd, **kw)

    def __getattr__(self, name):
        return getattr(self.sb, name)


@pytest.mark.parametrize("plant", [False, True], ids=["named_paths_only", "unnamed_change"])
async def test_the_reset_joins_the_apply_exec_unless_something_unnamed_changed(example_rows, plant):
    row = example_rows["slugify"]
    async with GradingSandbox(row, sandbox_options=OPTS) as ahead:
        ahead.sandbox = recorded = Recorded(ahead.sandbox, plant=plant)
        await ahead.ready()
        recorded.execs.clear()
        result = await grade(row, row.patch, sandbox=ahead)
        planted = await recorded.sb.exec("test -e /testbed/conftest.py")
    # The planted file is found and removed before the tests run: the gold patch still solves.
    assert (result.reward, result.failure_kind) == (1.0, None)
    assert planted.exit_code == 1
    assert ("conftest.py" in result.protected_paths_touched) == plant
    # apply (+ reset when only named paths changed), [the separate reset], the tests
    assert len(recorded.execs) == (3 if plant else 2), [c[:60] for c in recorded.execs]

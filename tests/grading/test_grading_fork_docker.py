"""Grading sandboxes copied from one set-up per group (rollout/grading_supply.py), in real
Docker: the set-up runs once, every copy grades like a sandbox set up whole (the gold patch
solves, a forged test file is caught), each copy carries its own secrets, and the snapshot goes
with the group."""

from __future__ import annotations

import uuid

import pytest

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.grade import GradingSandbox, grade
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.grading_supply import grading_supply, source_for
from coding_agent_rl.sandbox import docker_engine as engine

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]


def config(run_id: str, **kw) -> RolloutConfig:
    return RolloutConfig(backend="docker", sandbox_options={"run_id": run_id}, **kw)


def test_no_supply_unless_fork_and_a_group():
    assert grading_supply(config("x"), Defences()) is None
    assert grading_supply(config("x", fork_groups=True, group_size=1), Defences()) is None
    assert grading_supply(config("x", fork_groups=True, group_size=2), Defences()) is not None


async def test_a_groups_grading_sandboxes_are_copies_of_one_set_up(example_rows, make_diff):
    row = example_rows["slugify"]
    run_id = f"grading-fork-{uuid.uuid4().hex[:8]}"
    supply = grading_supply(config(run_id, fork_groups=True, group_size=3), Defences())
    assert supply is not None
    prepared0, copies0 = supply.stats.prepared, supply.stats.copies
    hack = make_diff("slugify", {"tests/test_textkit.py": "def test_nothing():\n    pass\n"})
    try:
        verdicts, secrets = [], []
        for diff in (row.patch, hack, ""):
            async with GradingSandbox(row, source=source_for(supply, row)) as ahead:
                prepared = await ahead.ready()
                secrets.append((prepared.key, prepared.module, prepared.canaries))
                verdicts.append(await grade(row, diff, sandbox=ahead))
        assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0]
        for diff, copied in zip((row.patch, hack, ""), verdicts, strict=True):
            whole = await grade(row, diff, sandbox_options={"run_id": run_id})
            assert (copied.failure_kind, copied.reason, copied.tests) == (
                whole.failure_kind,
                whole.reason,
                whole.tests,
            )
        assert (supply.stats.prepared - prepared0, supply.stats.copies - copies0) == (1, 3)
        keys, modules, canaries = zip(*secrets, strict=True)
        assert len(set(keys)) == 3 and len(set(modules)) == 3
        assert all(canaries) and len(set(canaries)) == 3  # each copy derives its own
        # The group's three copies were made and closed: its snapshot went with them.
        assert not supply._tasks
        assert not [i for i in engine.list_images() if i["Labels"].get(engine.LABEL_RUN) == run_id]
    finally:
        await supply.close()
    assert engine.list_containers(run_id) == []

"""Grading sandboxes from one preparation per task: with ``--fork`` the grading set-up (the
task's ``pre_commands``, the test user, the hidden tests' files) runs once per GRPO group in a
sandbox that is then snapshotted; each rollout's grading sandbox is a copy that only adds its own
secrets (plugin name, key, canaries). docs/sandbox-pool.md."""

from __future__ import annotations

from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.prepared import (
    GradingSetup,
    SetupSource,
    grading_sandbox,
    grading_setup,
)
from coding_agent_rl.grading.prepared import sandbox_options_for as grading_options
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.prepare import SandboxSupply
from coding_agent_rl.sandbox import BACKENDS, Sandbox


class GradingPreparer:
    """A supply's preparer for grading sandboxes; a claim gets the :class:`GradingSetup`."""

    def __init__(self, config: RolloutConfig, defences: Defences):
        self.config = config
        self.defences = defences
        self.backend = config.backend

    def copy_options(self, row: TaskRow) -> dict[str, Any]:
        return grading_options(self.backend, self.config.sandbox_options, row)

    async def create(self, row: TaskRow, *, template: bool = False) -> Sandbox:
        sb = grading_sandbox(self.backend, self.config.sandbox_options, row, template=template)
        await sb.__aenter__()
        return sb

    async def prepare(self, sb: Sandbox, row: TaskRow) -> GradingSetup:
        return await grading_setup(sb, row, self.defences)


def grading_supply(config: RolloutConfig, defences: Defences) -> SandboxSupply | None:
    """The supply of forked grading sandboxes ``config`` asks for (``fork_groups``, a group of
    more than one, a backend with snapshots); None: each grading sandbox is set up whole."""
    group = config.group_size
    if not config.fork_groups or (group is not None and group <= 1):
        return None
    if not BACKENDS.load(config.backend).supports_snapshot():
        return None
    preparer = GradingPreparer(config, defences)
    return SandboxSupply(preparer, fork=True, group_size=group, stats=f"{config.backend}-grading")


def source_for(supply: SandboxSupply, row: TaskRow) -> SetupSource:
    async def claim() -> tuple[Sandbox, GradingSetup]:
        sb, setup = await supply.obtain(row)
        assert isinstance(setup, GradingSetup)
        return sb, setup

    return claim

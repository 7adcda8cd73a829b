"""The act phase of a rollout: what the agent does in the sandbox the pipeline hands it.

Two implementations: :class:`~coding_agent_rl.rollout.cli_act.CliAct` (an agent CLI through the
adapter) and :class:`~coding_agent_rl.rollout.native.NativeAct` (the interaction loop). The
pipeline (``runner.py``) owns everything else: sandbox, workspace, diff, grading, record.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from coding_agent_rl.adapter.replay import ReplayPlan
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.rollout.record import RolloutRecord
from coding_agent_rl.rollout.timing import Timings
from coding_agent_rl.sandbox import Sandbox
from coding_agent_rl.trajectory.turn import Turn
from coding_agent_rl.types import Sample

# Called with (session_id, row) when the act starts, e.g. to hand the replay policy the task's
# gold patch.
SessionHook = Callable[[str, Any], Awaitable[None]]


@dataclasses.dataclass
class Job:
    """One attempt of one rollout, as every stage sees it."""

    row: TaskRow
    base: Sample
    sid: str
    record: RolloutRecord
    timings: Timings
    art: pathlib.Path | None
    sampling_params: dict[str, Any] | None
    evaluation: bool
    released: list[Sandbox] = dataclasses.field(default_factory=list)  # given back already
    prepared: list[Sandbox] = dataclasses.field(default_factory=list)  # from a prepared supply


@dataclasses.dataclass
class BranchTap:
    """A tree rollout's hook into a rollout (rollout/branch.py): the recorded turns its first
    requests replay (a branch), and its own turns, kept when it ends."""

    replay: ReplayPlan | None = None
    turns: list[Turn] = dataclasses.field(default_factory=list)


# The tree rollout the current attempt belongs to (set by ``RolloutRunner.run``).
BRANCH_TAP: contextvars.ContextVar[BranchTap | None] = contextvars.ContextVar(
    "branch_tap", default=None
)


@dataclasses.dataclass
class ActResult:
    """What the act returns. ``samples(reward)``: the rollout's samples for that reward;
    ``breach``: a resource limit the agent hit (the rollout ends there, the model's);
    ``agent_log``: the agent's log on the host (an artifact), if any."""

    samples: Callable[[float], list[Sample]]
    breach: str | None = None
    agent_log: pathlib.Path | str | None = None


class Act(Protocol):
    network: AgentNetwork  # what the agent sandbox may reach

    def session(self, job: Job) -> contextlib.AbstractAsyncContextManager[None]:
        """Around the whole attempt (e.g. the adapter session)."""
        ...

    async def sandbox_options(self, row: TaskRow) -> dict[str, Any]:
        """Extra options of the agent sandbox (mounts, network)."""
        ...

    def sandbox_failed(self, error: Exception) -> None:
        """The sandbox could not be created with those options."""
        ...

    async def attach(self, job: Job, sb: Sandbox, stack: contextlib.AsyncExitStack) -> None:
        """Right after the sandbox is created, alongside the workspace set-up."""
        ...

    async def prepare(self, job: Job, sb: Sandbox) -> None:
        """After the workspace is ready, before the agent starts (infra on failure)."""
        ...

    async def act(self, job: Job, sb: Sandbox) -> ActResult:
        """The agent works in ``sb``."""
        ...


@contextlib.asynccontextmanager
async def no_session(job: Job) -> AsyncIterator[None]:
    yield

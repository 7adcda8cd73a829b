"""Where rollouts run: an :class:`Executor` takes ``(row, sample)`` and returns the rollout's
outcome; callers (``run_batch``, and a trainer's driver) never touch the runtime behind it.

:class:`InProcessExecutor` runs them in this process on one :class:`Runtime` (adapter, policy,
runner), at most ``concurrency`` at a time. The contract is what a multi-node executor needs
too: everything it takes crosses a process boundary as plain data (a
:class:`~coding_agent_rl.rollout.runtime.RuntimeConfig` of dataclasses, its
:class:`~coding_agent_rl.settings.Settings` as ``model_dump(mode="json")``, a
:class:`~coding_agent_rl.datasets.schema.TaskRow`, a :class:`~coding_agent_rl.types.Sample`),
and what it returns is a :class:`~coding_agent_rl.rollout.config.RolloutOutcome` (samples and
the results.jsonl record). A worker per node builds its own runtime from the config: its own
adapter, reached by that node's sandboxes at the address their backend reports
(``Sandbox.adapter_bind_host`` / ``host_url``).

:data:`EXECUTORS` names them (``in-process``, ``ray``: :mod:`coding_agent_rl.rollout.ray_executor`,
a worker per node of a Ray cluster); :func:`create_executor` builds one by name.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.registry import Registry
from coding_agent_rl.rollout.config import RolloutOutcome
from coding_agent_rl.rollout.runtime import Runtime, RuntimeConfig
from coding_agent_rl.types import Sample


class Executor(Protocol):
    """Runs rollouts; ``start`` before the first, ``stop`` after the last."""

    async def start(self) -> None: ...

    async def run(
        self,
        row: TaskRow,
        sample: Sample,
        *,
        sampling_params: dict[str, Any] | None = None,
        evaluation: bool = False,
    ) -> RolloutOutcome: ...

    async def stop(self) -> None: ...


class InProcessExecutor:
    """Rollouts in this process, on one runtime, ``concurrency`` at a time."""

    def __init__(self, config: RuntimeConfig, *, concurrency: int = 4):
        self.config = config
        self.runtime = Runtime(config)
        self._sem = asyncio.Semaphore(max(1, concurrency))

    async def start(self) -> None:
        await self.runtime.start()

    async def run(
        self,
        row: TaskRow,
        sample: Sample,
        *,
        sampling_params: dict[str, Any] | None = None,
        evaluation: bool = False,
    ) -> RolloutOutcome:
        runner = self.runtime.runner
        assert runner is not None, "start() the executor first"
        async with self._sem:
            return await runner.run(
                row, sample, sampling_params=sampling_params, evaluation=evaluation
            )

    def expect(self, rows: list[TaskRow]) -> None:
        """Rollouts of ``rows`` come next, in that order (the sandbox pool prepares ahead)."""
        runner = self.runtime.runner
        supply = runner.supply if runner is not None else None
        if supply is not None:
            supply.expect(rows)

    async def stop(self) -> None:
        await self.runtime.stop()


EXECUTORS = Registry(
    "executor",
    "coding_agent_rl.executors",
    {
        "in-process": ("coding_agent_rl.rollout.executor:InProcessExecutor", None),
        "ray": ("coding_agent_rl.rollout.ray_executor:RayExecutor", "ray"),
    },
)


def create_executor(
    name: str, config: RuntimeConfig, *, concurrency: int | None = None
) -> Executor:
    """The executor ``name`` for ``config``; ``concurrency`` caps rollouts in flight (None: the
    executor's default: 4 in process, every free slot of the cluster on Ray). An executor's
    other knobs come from the settings (``ray_address`` ...)."""
    cls = EXECUTORS.load(name)
    executor: Executor = (
        cls(config) if concurrency is None else cls(config, concurrency=concurrency)
    )
    return executor

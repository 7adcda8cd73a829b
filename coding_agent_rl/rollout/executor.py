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
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from coding_agent_rl.datasets.schema import TaskRow
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

    async def stop(self) -> None:
        await self.runtime.stop()

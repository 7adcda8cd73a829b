"""The rollout worker of one Ray node: its own runtime (adapter, policy client, harness) on its
node's own container engine; :class:`~coding_agent_rl.rollout.ray_executor.RayExecutor` places
one per node as a Ray actor.

The worker is a Ray worker process of its node, started by that node's raylet, so it has the
environment of that node's ``ray start``: ``DOCKER_HOST`` there selects the node's engine, and
the other node-local settings (:data:`NODE_LOCAL`: cache, disk folder, adapter hosts) are read
from it too. Every other setting is the driver's (it arrives as plain data). The adapter listens
where this node's sandboxes reach it; the policy (SGLang router, or a CPU policy) is called from
here directly.

Each outcome leaves with the node named in its record (``node``: hostname/Ray node id,
``engine``: the container engine) and, unless artifacts go to a shared folder, the rollout's
artifacts packed within the budget (:mod:`coding_agent_rl.rollout.shipping`).

This module does not import Ray: the executor wraps :class:`RolloutWorker` with ``ray.remote``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import shutil
import socket
import tempfile
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.rollout.config import RolloutOutcome
from coding_agent_rl.rollout.runtime import Runtime, RuntimeConfig
from coding_agent_rl.rollout.shipping import artifact_paths, pack
from coding_agent_rl.settings import Settings
from coding_agent_rl.types import Sample

# Settings that belong to the node, not to the run: read from the worker's own environment.
NODE_LOCAL = ("docker_host", "cache_root", "disk_dir", "adapter_bind_host", "adapter_public_host")
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
TEARDOWN_GRACE_S = 60.0
WORKER_DIR = "car-ray-worker-"  # + pid: a worker's artifact folder in the temp dir


async def settle(timeout: float) -> None:
    """Wait (at most ``timeout`` s) until no other task of this event loop is pending."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if others:
        await asyncio.wait(others, timeout=timeout)


def reap_worker_dirs(root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """Remove the artifact folders of workers that died on this node (their pid is gone)."""
    root = root or pathlib.Path(tempfile.gettempdir())
    removed = []
    for d in root.glob(f"{WORKER_DIR}*"):
        pid = d.name.removeprefix(WORKER_DIR).split("-", 1)[0]
        if pid.isdigit() and not pathlib.Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


@dataclasses.dataclass
class Shipped:
    """What a worker returns for one rollout: the outcome and its artifacts (relative paths)."""

    outcome: RolloutOutcome
    files: dict[str, bytes]
    truncated: list[str]


def node_settings(driver: dict[str, Any], local: Settings) -> Settings:
    """The driver's settings (``model_dump(mode="json")``) with this node's own
    :data:`NODE_LOCAL` values."""
    merged = {**driver, **local.model_dump(mode="json", include=set(NODE_LOCAL))}
    return Settings.model_validate(merged)


class RolloutWorker:
    """One node's rollouts; ``max_concurrency`` (the node's slots) of them at a time."""

    def __init__(
        self,
        config: RuntimeConfig,
        driver_settings: dict[str, Any],
        *,
        artifact_budget: int,
        artifact_dir: str | None = None,
        slots: int = 1,
    ):
        self.artifact_budget = artifact_budget
        self.shared_dir = pathlib.Path(artifact_dir) if artifact_dir else None
        self.settings = node_settings(driver_settings, settings.load())
        self._tmp: pathlib.Path | None = None
        self._running: set[asyncio.Task[Any]] = set()
        out_dir = config.rollout.out_dir
        if out_dir is not None:  # artifacts wanted: a shared folder, else ours, shipped back
            if self.shared_dir is None:
                reap_worker_dirs()
                self._tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"{WORKER_DIR}{os.getpid()}-"))
            out_dir = self.shared_dir or self._tmp
        pool = config.rollout.pool_size
        self.config = dataclasses.replace(
            config,
            in_thread=False,  # the actor's own event loop serves the adapter
            settings=self.settings,
            rollout=dataclasses.replace(
                config.rollout,
                out_dir=out_dir,
                pool_size=slots if pool is None else pool,  # unset: one per slot of this node
            ),
        )
        self.runtime = Runtime(self.config)
        self.node = socket.gethostname()
        self.engine = (
            self.settings.docker_host or DEFAULT_DOCKER_HOST
            if config.rollout.backend == "docker"
            else config.rollout.backend
        )

    async def start(self) -> dict[str, str]:
        """Start the runtime; returns where this worker runs (``node``, ``engine``)."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        self.node = f"{socket.gethostname()}/{node_id[:8]}"
        await self.runtime.start()
        return {"node": self.node, "engine": self.engine}

    async def run(
        self,
        row: TaskRow,
        sample: Sample,
        sampling_params: dict[str, Any] | None,
        evaluation: bool,
    ) -> Shipped:
        runner = self.runtime.runner
        assert runner is not None, "start() the worker first"
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            outcome = await runner.run(
                row, sample, sampling_params=sampling_params, evaluation=evaluation
            )
        finally:
            self._running.discard(task)
        outcome.record["node"] = self.node
        outcome.record["engine"] = self.engine
        files: dict[str, bytes] = {}
        truncated: list[str] = []
        root = self._tmp
        if root is not None:
            rollout_dir = root / "rollouts" / f"{row.instance_id}__{sample.index}"
            paths = artifact_paths(outcome.record, rollout_dir, root)
            files, truncated = pack(root, paths, self.artifact_budget)
            shutil.rmtree(rollout_dir, ignore_errors=True)
        elif self.shared_dir is not None:
            outcome.record["artifacts_dir"] = str(self.shared_dir)
        return Shipped(outcome, files, truncated)

    def expect(self, rows: list[TaskRow]) -> None:
        """Rollouts of ``rows`` will come to this node, in that order (its pool prepares)."""
        runner = self.runtime.runner
        if runner is not None and runner.supply is not None:
            runner.supply.expect(rows)

    def cpu_s(self) -> float:
        """CPU seconds this worker process used (adapter, policy client, orchestration; the
        sandboxes' own processes are the engine's)."""
        t = os.times()
        return round(t.user + t.system, 3)

    async def stop(self) -> int:
        """Cancel the rollouts still running (each destroys its sandboxes), then stop; returns
        how many were cancelled."""
        running = list(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if running:  # a cancelled rollout returns while its sandboxes' shielded teardown
            await settle(TEARDOWN_GRACE_S)  # still runs here: let it end before we are killed
        try:
            await self.runtime.stop()
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
        return len(running)

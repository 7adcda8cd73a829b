"""Rollouts on a Ray cluster: one worker per node, each node's sandboxes on its own engine.

Nodes advertise :data:`SLOTS`; the driver places one worker per node and dispatches rows within
each node's slots. A rollout whose node dies is retried once on another node and ends exactly
once. Details: docs/modules/rollout.md.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from typing import Any

import ray  # the `ray` extra: without it the registry names the extra to install
from ray import exceptions as rex
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from coding_agent_rl import settings
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import InfraFailure, UserError
from coding_agent_rl.rollout.config import RolloutOutcome
from coding_agent_rl.rollout.record import RolloutRecord
from coding_agent_rl.rollout.runtime import RuntimeConfig
from coding_agent_rl.rollout.shipping import unpack
from coding_agent_rl.types import Sample, aborted_sample

log = logging.getLogger(__name__)

SLOTS = "coding_agent_rl_slots"
NODE_LOST = "node_lost"
RETRIES_ON_NODE_LOSS = 1
STOP_TIMEOUT_S = 120.0
START_TIMEOUT_S = 600.0  # placement, the tokenizer, the adapter and policy client
TELL_AHEAD = 2  # planned rows a node's pool hears ahead, per slot


@dataclasses.dataclass
class NodeWorker:
    """One node's worker and the driver's view of its slots."""

    node_id: str
    slots: int
    actor: Any
    label: str = ""
    engine: str = ""
    free: int = 0
    alive: bool = True
    lost: bool = False
    finished: int = 0
    cpu_s: float | None = None  # the worker process's CPU seconds, read at stop


def slot_nodes(nodes: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """``(node id, slots)`` of the live nodes of ``ray.nodes()`` that advertise :data:`SLOTS`."""
    out = []
    for node in nodes:
        slots = int((node.get("Resources") or {}).get(SLOTS, 0))
        if node.get("Alive") and slots > 0:
            out.append((str(node["NodeID"]), slots))
    return sorted(out)


def plan_rows(rows: list[TaskRow], workers: list[NodeWorker]) -> dict[str, list[TaskRow]]:
    """Which node each coming rollout should run on (node id -> its rows, in order): a task's
    rollouts (a GRPO group) stay on one node, each task goes to the node with the fewest planned
    rollouts per slot. The node's pool prepares for them; a rollout still runs where a slot is
    free (its planned node first)."""
    load = {w.node_id: 0 for w in workers}
    slots = {w.node_id: w.slots for w in workers}
    node_of: dict[str, str] = {}
    plan: dict[str, list[TaskRow]] = {w.node_id: [] for w in workers}
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.instance_id] = counts.get(row.instance_id, 0) + 1
    for row in rows:
        node = node_of.get(row.instance_id)
        if node is None and load:
            node = min(load, key=lambda n: (load[n] / slots[n], n))
            node_of[row.instance_id] = node
            load[node] += counts[row.instance_id]
        if node is not None:
            plan[node].append(row)
    return plan


def lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors for a call whose worker or node died."""
    names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "OwnerDiedError")
    return tuple(getattr(rex, n) for n in names if hasattr(rex, n))


class RayExecutor:
    """See the module docstring. ``address``: the cluster (default: ``ray_address``, else the
    Ray already initialised in this process, else ``auto``); ``nodes``: use at most that many
    of the slot nodes (a benchmark's 1 vs 2)."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        concurrency: int | None = None,
        address: str | None = None,
        nodes: int | None = None,
        artifact_budget: int | None = None,
        artifact_dir: str | None = None,
    ):
        conf = config.settings or settings.current()
        self.config = config
        self.address = address or conf.ray_address
        self.max_nodes = nodes
        self.artifact_budget = (
            conf.ray_artifact_budget if artifact_budget is None else artifact_budget
        )
        shared = artifact_dir or conf.ray_artifact_dir
        self.artifact_dir = str(shared) if shared else None
        self.settings = conf
        self.workers: list[NodeWorker] = []
        self._cap = asyncio.Semaphore(concurrency) if concurrency else None
        self._cond: asyncio.Condition | None = None
        self._initialised_ray = False
        self.in_flight = 0
        self.max_in_flight = 0
        self._planned: dict[str, str] = {}  # instance id -> the node its pool prepares on
        # Planned rows not yet told to their node: a node hears a few ahead of its slots, then
        # one more as each of its rollouts ends (rows cross to the node only when near).
        self._untold: dict[str, collections.deque[TaskRow]] = {}
        self._told: set[asyncio.Future[None]] = set()  # expect calls still in flight

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        from coding_agent_rl.rollout.ray_worker import RolloutWorker

        if self._cond is not None:
            return  # started already (a caller may start it before handing it on)
        if not ray.is_initialized():
            ray.init(address=self.address or "auto", ignore_reinit_error=True)
            self._initialised_ray = True
        found = slot_nodes(ray.nodes())
        if not found:
            raise UserError(
                f"no live node of the Ray cluster advertises the resource {SLOTS!r}; start "
                f"nodes with: ray start ... --resources '{{\"{SLOTS}\": N}}'"
            )
        if self.max_nodes:
            found = found[: self.max_nodes]
        remote = ray.remote(RolloutWorker)
        driver = self.settings.model_dump(mode="json")
        for node_id, slots in found:
            actor = remote.options(
                num_cpus=0,
                resources={SLOTS: slots},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                max_concurrency=slots + 2,  # the slots, plus stop / cpu_s
                max_restarts=0,
                max_task_retries=0,
            ).remote(
                self.config,
                driver,
                artifact_budget=self.artifact_budget,
                artifact_dir=self.artifact_dir,
                slots=slots,
            )
            self.workers.append(NodeWorker(node_id, slots, actor, free=slots))
        # A node whose slots another run holds never places our worker: give up on it.
        started = await asyncio.gather(
            *(
                asyncio.wait_for(_await(w.actor.start.remote()), START_TIMEOUT_S)
                for w in self.workers
            ),
            return_exceptions=True,
        )
        for w, info in zip(self.workers, started, strict=True):
            if isinstance(info, BaseException):
                why = "timed out" if isinstance(info, asyncio.TimeoutError) else info
                log.error("ray node %s: worker failed to start: %s", w.node_id[:8], why)
                w.alive = False
                _kill(w.actor)
            else:
                w.label, w.engine = info["node"], info["engine"]
                log.info("ray node %s: %d slot(s), engine %s", w.label, w.slots, w.engine)
        if not any(w.alive for w in self.workers):
            raise InfraFailure(
                f"no Ray worker started on {len(self.workers)} node(s): {started[0]}",
                stage="executor",
            )
        self._cond = asyncio.Condition()

    async def stop(self) -> None:
        """Each live worker cancels its rollouts (their sandboxes go) and stops; then every
        worker is killed, and Ray shut down if this executor initialised it."""
        live = [w for w in self.workers if w.alive]
        try:
            if live:
                cpu = await _each(live, "cpu_s", 30.0)  # the per-node load, for the stats
                for w, used in zip(live, cpu, strict=True):
                    w.cpu_s = used if isinstance(used, float) else None
                t0 = time.monotonic()
                stopped = await _each(live, "stop", STOP_TIMEOUT_S)
                log.info(
                    "ray workers stopped in %.1fs (rollouts cancelled: %s)",
                    time.monotonic() - t0,
                    ", ".join(f"{w.label}: {n}" for w, n in zip(live, stopped, strict=True)),
                )
        finally:
            for w in self.workers:
                _kill(w.actor)
                w.alive = False
            self._cond = None
            if self._initialised_ray:
                ray.shutdown()
                self._initialised_ray = False

    # ---- rollouts -------------------------------------------------------------------------
    def expect(self, rows: list[TaskRow]) -> None:
        """Rollouts of ``rows`` come next, in that order: each node's sandbox pool prepares for
        the rows planned on it (:func:`plan_rows`); nothing is kept where the pool is off."""
        live = [w for w in self.workers if w.alive]
        for node, planned in plan_rows(rows, live).items():
            for row in planned:
                self._planned[row.instance_id] = node
            self._untold.setdefault(node, collections.deque()).extend(planned)
        for worker in live:
            self._tell(worker, TELL_AHEAD * worker.slots)

    def _tell(self, worker: NodeWorker, n: int) -> None:
        """Tell ``worker``'s pool its next ``n`` planned rows."""
        queue = self._untold.get(worker.node_id)
        rows = [queue.popleft() for _ in range(min(n, len(queue)))] if queue else []
        if not rows or not worker.alive:
            return
        told = asyncio.ensure_future(_observe(worker.actor.expect.remote(rows), worker))
        self._told.add(told)
        told.add_done_callback(self._told.discard)

    async def run(
        self,
        row: TaskRow,
        sample: Sample,
        *,
        sampling_params: dict[str, Any] | None = None,
        evaluation: bool = False,
    ) -> RolloutOutcome:
        if self._cap is None:
            return await self._run(row, sample, sampling_params, evaluation)
        async with self._cap:
            return await self._run(row, sample, sampling_params, evaluation)

    async def _run(
        self,
        row: TaskRow,
        sample: Sample,
        sampling_params: dict[str, Any] | None,
        evaluation: bool,
    ) -> RolloutOutcome:
        lost: list[dict[str, Any]] = []
        tried: set[str] = set()
        for _ in range(1 + RETRIES_ON_NODE_LOSS):
            worker = await self._acquire(exclude=tried, prefer=self._planned.get(row.instance_id))
            if worker is None:
                break
            tried.add(worker.node_id)
            ref = worker.actor.run.remote(row, sample, sampling_params, evaluation)
            try:
                shipped = await ref
            except asyncio.CancelledError:
                _cancel(ref)  # the worker's rollout ends too, destroying its sandboxes
                raise
            except lost_errors() as e:
                lost.append(await self._lose(worker, e))
                continue
            finally:
                await self._release(worker)
                self._tell(worker, 1)  # its slot is free: the next planned row, ahead
            worker.finished += 1
            return self._receive(shipped, lost)
        return self._lost_outcome(row, sample, lost)

    def _receive(self, shipped: Any, lost: list[dict[str, Any]]) -> RolloutOutcome:
        outcome: RolloutOutcome = shipped.outcome
        record = outcome.record
        out_dir = self.config.rollout.out_dir
        if out_dir is not None and shipped.files:
            unpack(out_dir, shipped.files)
        if shipped.truncated:
            record["artifacts_truncated"] = list(shipped.truncated)
        if lost:
            record["lost_attempts"] = lost
            record["retries"] = int(record.get("retries") or 0) + len(lost)
            record.setdefault("metrics", {})["retries"] = record["retries"]
        return outcome

    def _lost_outcome(
        self, row: TaskRow, sample: Sample, lost: list[dict[str, Any]]
    ) -> RolloutOutcome:
        """The final record of a rollout whose every attempt was lost with its node."""
        last = lost[-1] if lost else {"node": None, "reason": "no live node left"}
        reason = f"node lost: {last['node']}: {last['reason']}"
        record = RolloutRecord(
            rollout_id=sample.rollout_id if sample.rollout_id is not None else sample.index,
            instance_id=row.instance_id,
            sample_index=sample.index,
            group_index=sample.group_index,
            session_id="",
        )
        record.set(
            failure_kind="infra",
            abort_reason=reason,
            reward=0.0,
            infra_stage=NODE_LOST,
            num_segments=0,
            node=last["node"],
            lost_attempts=lost,
            retries=max(0, len(lost) - 1),
        )
        placeholder = aborted_sample(sample, reason, "infra", instance_id=row.instance_id)
        return RolloutOutcome([placeholder], record.as_dict())

    # ---- the pool -------------------------------------------------------------------------
    async def _acquire(self, exclude: set[str], prefer: str | None = None) -> NodeWorker | None:
        """A free slot on a live node not in ``exclude``: node ``prefer`` if it has one, else
        the one with the most free; None when no such node is left."""
        assert self._cond is not None, "start() the executor first"
        async with self._cond:
            while True:
                live = [w for w in self.workers if w.alive and w.node_id not in exclude]
                if not live:
                    return None
                free = [w for w in live if w.free > 0]
                if free:
                    worker = max(free, key=lambda w: (w.node_id == prefer, w.free))
                    worker.free -= 1
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    return worker
                await self._cond.wait()

    async def _release(self, worker: NodeWorker) -> None:
        assert self._cond is not None
        async with self._cond:
            worker.free += 1
            self.in_flight -= 1
            self._cond.notify_all()

    async def _lose(self, worker: NodeWorker, error: BaseException) -> dict[str, Any]:
        """Take ``worker``'s node out of the pool; the lost attempt's entry."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        reason = f"{type(error).__name__}: {first}"[:500]
        if worker.alive:
            log.warning("ray node %s lost (%s); its slots leave the pool", worker.label, reason)
            worker.alive = False
            worker.lost = True
            _kill(worker.actor)  # an unreachable-but-alive worker must not go on
            assert self._cond is not None
            async with self._cond:
                self._cond.notify_all()  # waiters for this node's slots look elsewhere
        return {
            "node": worker.label,
            "engine": worker.engine,
            "failure_kind": "infra",
            "infra_stage": NODE_LOST,
            "reason": reason,
        }

    def stats(self) -> dict[str, Any]:
        """Per node: its slots, rollouts finished there, whether it was lost; the most rollouts
        in flight at once (never above the slots)."""
        return {
            "name": "ray",
            "nodes": {
                w.label or w.node_id[:8]: {
                    "slots": w.slots,
                    "finished": w.finished,
                    "engine": w.engine,
                    "lost": w.lost,
                    "worker_cpu_s": w.cpu_s,
                }
                for w in self.workers
            },
            "slots": sum(w.slots for w in self.workers),
            "max_in_flight": self.max_in_flight,
        }


async def _await(ref: Any) -> Any:
    return await ref


async def _observe(ref: Any, worker: NodeWorker) -> None:
    """Await a fire-and-forget call: its failure (a lost node) is logged, never unhandled."""
    try:
        await ref
    except Exception as e:
        log.warning("ray node %s: telling its pool what comes failed: %s", worker.label, e)


async def _each(workers: list[NodeWorker], method: str, timeout: float) -> list[Any]:
    """``method`` called on every worker at once; each its result, error or timeout."""
    calls = (asyncio.wait_for(_await(getattr(w.actor, method).remote()), timeout) for w in workers)
    return list(await asyncio.gather(*calls, return_exceptions=True))


def _cancel(ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception as e:  # finished meanwhile, or its worker is gone
        log.debug("ray.cancel: %s", e)


def _kill(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception as e:  # already gone with its node
        log.debug("ray.kill: %s", e)

"""Sandboxes ready before they are asked for: a warm pool and one preparation copied per GRPO
group (docs/sandbox-pool.md), for agent sandboxes (:class:`AgentPreparer`) and grading sandboxes
(rollout/grading_supply.py). A claimed agent sandbox never served another rollout and holds no
session key until its rollout writes the CLI's configuration.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from coding_agent_rl.errors import InfraFailure, SandboxError
from coding_agent_rl.sandbox import BACKENDS, Sandbox
from coding_agent_rl.sandbox.admission import STATS

if TYPE_CHECKING:
    from coding_agent_rl.datasets.schema import TaskRow
    from coding_agent_rl.rollout.agent import AgentPhase
    from coding_agent_rl.sandbox.snapshot import Snapshot

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 10.0
MAX_IDLE_SNAPSHOTS = 8  # snapshots kept with no copy in use (disk on the engine)


class Preparer(Protocol):
    """What a supply prepares: how a sandbox of a row is made and readied."""

    backend: str

    async def create(self, row: TaskRow, *, template: bool = False) -> Sandbox:
        """A started sandbox for ``row`` (``template``: one made to be snapshotted)."""
        ...

    async def prepare(self, sb: Sandbox, row: TaskRow) -> Any:
        """Ready ``sb`` for ``row``; returns what a claim gets with the sandbox."""
        ...

    def copy_options(self, row: TaskRow) -> dict[str, Any]:
        """The options of a copy of ``row``'s snapshot."""
        ...


class AgentPreparer:
    """Agent sandboxes: the CLI installed, the workspace set up; a claim gets the base commit."""

    def __init__(self, agent: AgentPhase):
        self.agent = agent
        self.backend = agent.config.backend

    async def create(self, row: TaskRow, *, template: bool = False) -> Sandbox:
        return await self.agent.create_sandbox(row, template=template)

    async def prepare(self, sb: Sandbox, row: TaskRow) -> str:
        if self.agent.harness is not None:
            await self.agent.harness.install(sb)
        return await self.agent.prepare_repo(sb, row)

    def copy_options(self, row: TaskRow) -> dict[str, Any]:
        return self.agent.sandbox_options(row)


@dataclasses.dataclass
class Prepared:
    sandbox: Sandbox
    base_commit: Any  # what the preparer returned (an agent sandbox's: its base commit)


@dataclasses.dataclass
class _Task:
    """One task's state in the supply."""

    row: TaskRow
    expected: int = 0  # claims still to come (0: unknown)
    # Sandboxes being prepared or prepared for it, oldest first (claims take them in order).
    ready: collections.deque[asyncio.Future[Prepared]] = dataclasses.field(
        default_factory=collections.deque
    )
    snapshot: asyncio.Future[tuple[Snapshot, Any]] | None = None
    live: int = 0  # copies of the snapshot not yet closed (or being made)


class SandboxSupply:
    """Prepared sandboxes for one runner; ``await close()`` removes what is left. ``stats``:
    the counters' key in :data:`STATS` (default: the backend's)."""

    def __init__(
        self,
        preparer: Preparer,
        *,
        pool_size: int = 0,
        pool_idle_s: float = 0.0,
        fork: bool = False,
        group_size: int | None = None,
        stats: str | None = None,
    ):
        self.preparer = preparer
        self.backend = preparer.backend
        self._stats_key = stats or self.backend
        self.pool_size = max(0, pool_size)
        self.pool_idle_s = pool_idle_s
        self._timers: dict[asyncio.Future[Prepared], asyncio.TimerHandle] = {}  # idle limits
        self._expiring: set[asyncio.Future[None]] = set()  # unclaimed sandboxes being destroyed
        self._sources: dict[str, str] = {}  # sandbox id -> how its claim got it, until closed
        # A group of one gains nothing from a copy (it would pay the snapshot on top).
        single = group_size is not None and group_size <= 1
        self.fork = fork and not single and BACKENDS.load(self.backend).supports_snapshot()
        self.group_size = group_size
        self._tasks: dict[str, _Task] = {}
        self._closed = False
        self._finished: set[str] = set()  # tasks whose group's copies were all handed out
        if fork and not single and not self.fork:
            log.warning(
                "the %s sandbox has no snapshots: each sample prepares its own", self.backend
            )

    @property
    def active(self) -> bool:
        return self.fork or self.pool_size > 0

    @property
    def stats(self) -> Any:
        return STATS[self._stats_key]

    def _task(self, row: TaskRow) -> _Task:
        task = self._tasks.get(row.instance_id)
        if task is None:
            # A group whose copies were all handed out: a retry gets a copy on demand only.
            first = row.instance_id not in self._finished
            task = self._tasks[row.instance_id] = _Task(
                row, expected=first * (self.group_size or 0)
            )
        return task

    # ---- claiming --------------------------------------------------------------------------
    async def obtain(self, row: TaskRow) -> tuple[Sandbox, Any]:
        """A sandbox for ``row`` and what its preparation returned (an agent sandbox's base
        commit); None: not prepared (the supply is off), the caller prepares it."""
        if not self.active:
            return await self.preparer.create(row), None
        task = self._task(row)
        if task.expected:
            task.expected -= 1
        prepared = None
        while task.ready and prepared is None:
            fut = task.ready.popleft()
            if (timer := self._timers.pop(fut, None)) is not None:
                timer.cancel()  # claimed: no idle limit any more
            try:
                candidate = await self._claim(fut)
            except asyncio.CancelledError:  # still the pool's: the next claim (or close) takes it
                task.ready.appendleft(fut)
                if fut.done():
                    self._arm_expiry(task, fut)
                raise
            if candidate is None:
                continue
            try:
                healthy = await self._healthy(candidate.sandbox)
            except BaseException:  # cancelled: nobody else holds it
                await candidate.sandbox.close()
                raise
            if healthy:
                prepared = candidate
                self.stats.hits += 1
            else:
                self.stats.replaced += 1
                await candidate.sandbox.close()
        self._refill()
        source = "pool"
        if prepared is None:
            self.stats.misses += 1
            prepared = await self._make(task)
            source = "copy" if self.fork else "prepared"
        sb = prepared.sandbox
        self._sources[sb.sandbox_id] = source

        async def forget() -> None:
            self._sources.pop(sb.sandbox_id, None)

        sb.after_close(forget)
        if not self.fork and not task.expected and not task.ready:
            self._tasks.pop(row.instance_id, None)  # nothing more is owed to this task
            self._finished.add(row.instance_id)
        return prepared.sandbox, prepared.base_commit

    def source(self, sb: Sandbox) -> str | None:
        """How the claim of ``sb`` was served: ``pool`` (prepared ahead), ``copy`` (of its
        group's snapshot, on demand), ``prepared`` (on demand); None: not this supply's."""
        return self._sources.get(sb.sandbox_id)

    async def _claim(self, fut: asyncio.Future[Prepared]) -> Prepared | None:
        """A pooled sandbox (waiting for one still being prepared); None: its preparation
        failed (logged), the caller takes the next or prepares its own."""
        await asyncio.wait([fut])
        if fut.cancelled() or fut.exception() is not None:
            return None
        self.stats.pool_size -= 1  # counted in when its preparation ended
        return fut.result()

    @staticmethod
    async def _healthy(sb: Sandbox) -> bool:
        try:
            result = await sb.exec("true", timeout=HEALTH_TIMEOUT_S)
        except SandboxError as e:
            log.warning(
                "pooled %s sandbox %s failed its health check: %s", sb.backend, sb.sandbox_id, e
            )
            return False
        if not result.ok:
            log.warning("pooled %s sandbox %s failed its health check", sb.backend, sb.sandbox_id)
        return result.ok

    async def _make(self, task: _Task) -> Prepared:
        """A freshly prepared sandbox for ``task``: a copy of its snapshot, or made whole."""
        if not self.fork:
            sb = await self.preparer.create(task.row)
            try:
                base = await self.preparer.prepare(sb, task.row)
            except BaseException:
                await sb.close()
                raise
            self.stats.prepared += 1
            return Prepared(sb, base)
        if task.snapshot is None:
            await self._evict_idle()
            task.snapshot = asyncio.ensure_future(self._snapshot(task.row))
        making = task.snapshot
        task.live += 1  # counted from the claim: no release or eviction while it is copying
        try:
            try:
                snap, base = await asyncio.shield(making)
            except Exception:
                if task.snapshot is making and making.done():
                    task.snapshot = None  # the next claim tries again
                raise
            try:
                sb = await snap.copy()
            except SandboxError as e:
                raise InfraFailure(f"sandbox: {e}", stage="sandbox") from e
        except BaseException:
            task.live -= 1
            await self._maybe_release(task)
            raise
        self.stats.copies += 1

        async def released() -> None:
            task.live -= 1
            await self._maybe_release(task)

        sb.after_close(released)
        return Prepared(sb, base)

    async def _snapshot(self, row: TaskRow) -> tuple[Snapshot, Any]:
        """Prepare ``row`` once in a sandbox made to be snapshotted; freeze it."""
        sb = await self.preparer.create(row, template=True)
        try:
            base = await self.preparer.prepare(sb, row)
            self.stats.prepared += 1
            # From here the snapshot owns ``sb`` (and closes it).
            return await sb.snapshot(**self.preparer.copy_options(row)), base
        except BaseException as e:
            await sb.close()
            if isinstance(e, SandboxError):
                raise InfraFailure(f"sandbox: snapshot: {e}", stage="sandbox") from e
            raise

    async def _maybe_release(self, task: _Task, *, idle: bool = False) -> None:
        """Remove ``task``'s snapshot once every copy it owes was made and closed (``idle``:
        once none is in use or waiting, even if copies are still owed)."""
        fut = task.snapshot
        if fut is None or not fut.done() or task.live or task.ready:
            return
        if not idle and (self.group_size is None or task.expected > 0):
            return
        task.snapshot = None
        self._tasks.pop(task.row.instance_id, None)
        self._finished.add(task.row.instance_id)
        if not fut.cancelled() and fut.exception() is None:
            await fut.result()[0].remove()

    async def _evict_idle(self) -> None:
        """Keep at most :data:`MAX_IDLE_SNAPSHOTS` snapshots that no copy uses (a group whose
        remaining samples never came, e.g. aborted by the trainer): the oldest go first."""
        idle = [
            t
            for t in self._tasks.values()
            if t.snapshot is not None and t.snapshot.done() and not t.live and not t.ready
        ]
        for task in idle[: max(0, len(idle) - MAX_IDLE_SNAPSHOTS + 1)]:
            await self._maybe_release(task, idle=True)

    # ---- ahead of demand ---------------------------------------------------------------------
    def expect(self, rows: Iterable[TaskRow]) -> None:
        """Rollouts of ``rows`` (one entry per rollout, in the order they will be claimed) are
        coming: the pool prepares for them ahead (nothing is kept when the supply is off)."""
        if not self.active:
            return
        for row in rows:
            task = self._task(row)
            if self.group_size is None:
                task.expected += 1
        self._refill()

    def _pooled(self) -> int:
        return sum(len(t.ready) for t in self._tasks.values())

    def _refill(self) -> None:
        """Start preparing sandboxes for the tasks expected next (the oldest first: ``_tasks``
        keeps the order they were expected in), up to ``pool_size``."""
        if self._closed or self.pool_size <= 0:
            return
        room = self.pool_size - self._pooled()
        for task in self._tasks.values():
            while room > 0 and task.expected > len(task.ready):
                room -= 1
                fut = asyncio.ensure_future(self._fill(task))
                fut.add_done_callback(functools.partial(self._arm_expiry, task))
                task.ready.append(fut)
            if room <= 0:
                break

    async def _fill(self, task: _Task) -> Prepared:
        try:
            prepared = await self._make(task)
        except Exception as e:  # the claim that finds the pool empty prepares on demand
            log.warning("preparing a pooled sandbox of %s failed: %s", task.row.instance_id, e)
            raise
        self.stats.pool_size += 1
        return prepared

    def _arm_expiry(self, task: _Task, fut: asyncio.Future[Prepared]) -> None:
        if self._closed or self.pool_idle_s <= 0 or fut.cancelled() or fut.exception():
            return
        if fut in task.ready:  # not claimed while it was being prepared
            loop = asyncio.get_running_loop()
            self._timers[fut] = loop.call_later(self.pool_idle_s, self._expire, task, fut)

    def _expire(self, task: _Task, fut: asyncio.Future[Prepared]) -> None:
        """``fut``'s sandbox waited ``pool_idle_s`` unclaimed: the claim it was made for is not
        coming soon (a stalled trainer, a group cut short). Destroy it; do not make another."""
        self._timers.pop(fut, None)
        if self._closed or fut not in task.ready:
            return  # claimed meanwhile, or the supply is closing
        task.ready.remove(fut)
        task.expected = max(0, task.expected - 1)
        self.stats.pool_size -= 1
        self.stats.expired += 1
        closing = asyncio.ensure_future(fut.result().sandbox.close())
        self._expiring.add(closing)
        closing.add_done_callback(self._expiring.discard)
        if not task.expected and not task.ready and task.snapshot is None:
            self._tasks.pop(task.row.instance_id, None)
            self._finished.add(task.row.instance_id)  # a late claim prepares on demand only
        self._refill()  # the room goes to the rows expected next

    async def close(self) -> None:
        """Destroy every unclaimed sandbox and remove every snapshot."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._expiring:
            await asyncio.wait(set(self._expiring))
        for task in list(self._tasks.values()):
            while task.ready:
                fut = task.ready.popleft()
                fut.cancel()
                prepared = await self._claim(fut)
                if prepared is not None:
                    await prepared.sandbox.close()
            if task.snapshot is not None:
                snap, task.snapshot = task.snapshot, None
                if not snap.done():
                    snap.cancel()
                await asyncio.wait([snap])
                if not snap.cancelled() and snap.exception() is None:
                    await snap.result()[0].remove()
        self._tasks.clear()


def supply_for(agent: AgentPhase) -> SandboxSupply:
    """The supply a runner's config asks for."""
    cfg = agent.config
    return SandboxSupply(
        AgentPreparer(agent),
        pool_size=cfg.pool_size or 0,
        pool_idle_s=cfg.pool_idle_s,
        fork=cfg.fork_groups,
        group_size=cfg.group_size,
    )

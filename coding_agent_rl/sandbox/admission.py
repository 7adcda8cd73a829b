"""Admission control for sandbox creation: a cap on creations in flight per backend, jittered
starts when creations contend, a per-attempt timeout retried with backoff, and the counters a
run reports (``metrics.prom``, the progress line). See docs/sandbox-pool.md.

Every ``Sandbox.__aenter__`` passes through :func:`creating` (the cap, the jitter, in-flight and
start-latency counts); :func:`start` adds the timeout and the retries for callers that can
build a new sandbox object per attempt (the agent's sandbox, the pool).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from coding_agent_rl import settings
from coding_agent_rl.errors import SandboxCreateError


class Startable(Protocol):
    """What :func:`start` needs of a sandbox object (``Sandbox`` is one)."""

    @property
    def backend(self) -> str: ...

    async def __aenter__(self) -> Any: ...


S = TypeVar("S", bound=Startable)

log = logging.getLogger(__name__)

LATENCY_WINDOW = 1024  # start latencies kept per backend (for p50 / p99)


@dataclasses.dataclass
class Stats:
    """One backend's counters in this process (never reset; a run reports its deltas)."""

    in_flight: int = 0
    started: int = 0
    failed: int = 0
    timeouts: int = 0
    retries: int = 0
    pool_size: int = 0  # prepared sandboxes waiting to be claimed
    hits: int = 0  # claims served from the pool (or a group's copies)
    misses: int = 0  # claims that had to create and prepare on demand
    replaced: int = 0  # claimed sandboxes that failed their health check
    expired: int = 0  # pooled sandboxes destroyed unclaimed after the idle limit
    prepared: int = 0  # agent sandboxes prepared whole by a supply (a group's: once)
    copies: int = 0  # sandboxes started from a snapshot
    latencies: collections.deque[float] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=LATENCY_WINDOW)
    )

    def quantile(self, q: float) -> float | None:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] if data else None

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "latencies"}
        out["start_p50_s"] = self.quantile(0.5)
        out["start_p99_s"] = self.quantile(0.99)
        return out


# The figures that only grow (a run reports its own share of them).
CUMULATIVE = (
    "started",
    "failed",
    "timeouts",
    "retries",
    "hits",
    "misses",
    "replaced",
    "expired",
    "prepared",
    "copies",
)

STATS: collections.defaultdict[str, Stats] = collections.defaultdict(Stats)

# asyncio primitives belong to one loop (tests run one loop per test, slime one per process).
_gates: dict[tuple[int, str, int], tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}


def _gate(backend: str, limit: int) -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    key = (id(loop), backend, limit)
    entry = _gates.get(key)
    if entry is None or entry[0] is not loop:
        for k in [k for k, (lp, _) in _gates.items() if lp.is_closed()]:
            del _gates[k]
        entry = _gates[key] = (loop, asyncio.Semaphore(limit))
    return entry[1]


# The timeout :func:`start` gives the creation it awaits (None: none); it runs from the slot.
_attempt_timeout: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "create_timeout_s", default=None
)


class _Expired(Exception):
    """A creation held its slot longer than its attempt's timeout (and was cancelled)."""


@contextlib.asynccontextmanager
async def creating(backend: str, limit: int | None = None) -> AsyncIterator[None]:
    """One creation of a ``backend`` sandbox: waits for a slot (``limit``, default the settings'
    ``boot_concurrency``, in flight), sleeps a random ``[0, admission_jitter_s)`` when others are
    in flight (so a burst does not hit the engine in lockstep), and counts it. Under
    :func:`start`, the creation is cancelled once it has held its slot for the attempt's timeout
    (the wait for a slot does not count) and raises :class:`_Expired`."""
    conf = settings.current()
    stats = STATS[backend]
    if stats.in_flight and conf.admission_jitter_s > 0:  # before the slot: it is not held idle
        await asyncio.sleep(random.uniform(0, conf.admission_jitter_s))
    async with _gate(backend, conf.boot_concurrency if limit is None else max(1, limit)):
        stats.in_flight += 1
        t0 = time.monotonic()
        task, timeout = asyncio.current_task(), _attempt_timeout.get()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(timeout, expire) if timeout else None
        try:
            yield
        except BaseException as e:
            stats.failed += 1
            if expired and isinstance(e, asyncio.CancelledError):
                if hasattr(task, "uncancel"):  # Python >= 3.11: the cancel was ours
                    task.uncancel()
                raise _Expired() from None
            raise
        else:
            stats.started += 1
            stats.latencies.append(time.monotonic() - t0)
        finally:
            if timer is not None:
                timer.cancel()
            stats.in_flight -= 1


async def start(
    make: Callable[[], S],
    *,
    timeout: float | None = None,
    attempts: int | None = None,
) -> S:
    """A started sandbox from ``make()`` (a new, not-started object per attempt). An attempt
    whose creation holds its slot longer than ``timeout`` (default ``create_timeout_s``; the
    wait for a slot does not count) is destroyed, counted and retried after a jittered
    exponential backoff, ``attempts`` times in all (default ``create_timeout_attempts``); the
    last timeout raises :class:`SandboxCreateError`."""

    conf = settings.current()
    timeout = conf.create_timeout_s if timeout is None else timeout
    attempts = max(1, conf.create_timeout_attempts if attempts is None else attempts)
    for attempt in range(attempts):
        sb = make()
        token = _attempt_timeout.set(timeout if timeout > 0 else None)
        try:
            # __aenter__ destroys what it created when the timeout cancels it.
            await sb.__aenter__()
            return sb
        except _Expired:
            stats = STATS[sb.backend]
            stats.timeouts += 1
            if attempt == attempts - 1:
                raise SandboxCreateError(
                    f"{sb.backend}: sandbox creation timed out {attempts} time(s) "
                    f"(create_timeout_s={timeout:g})"
                ) from None
            stats.retries += 1
            delay = min(30.0, 0.5 * 2**attempt) * (0.5 + random.random())
            log.warning(
                "%s sandbox creation timed out after %.0f s; retrying in %.1f s (%d/%d)",
                sb.backend,
                timeout,
                delay,
                attempt + 2,
                attempts,
            )
            await asyncio.sleep(delay)
        finally:
            _attempt_timeout.reset(token)
    raise AssertionError("unreachable")


def snapshot() -> dict[str, dict[str, Any]]:
    """Every backend's counters now, by backend."""
    return {backend: stats.as_dict() for backend, stats in STATS.items()}


def progress_text(since: dict[str, dict[str, Any]] | None = None) -> str:
    """The progress line's sandbox part (this process's, every backend together; counts since
    ``since``, a :func:`snapshot`): creations in flight, start p50, the pool's size, hits and
    misses, timeouts; empty while nothing was created since."""
    since = since or {}
    now = snapshot()

    def total(name: str) -> int:
        return sum(
            (f.get(name) or 0) - (since.get(b, {}).get(name) or 0 if name in CUMULATIVE else 0)
            for b, f in now.items()
        )

    if not (total("started") or total("in_flight") or total("hits") or total("misses")):
        return ""
    lat = sorted(x for st in STATS.values() for x in st.latencies)
    p50 = f"{lat[len(lat) // 2]:.2f}s" if lat else "-"
    text = f"sandboxes: starting {total('in_flight')}, start p50 {p50}"
    if total("hits") or total("misses") or total("pool_size"):
        text += f", pool {total('pool_size')} hit {total('hits')} miss {total('misses')}"
    return text + (f", timeouts {total('timeouts')}" if total("timeouts") else "")

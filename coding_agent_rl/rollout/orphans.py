"""Removing the sandboxes of dead runs: at every runtime start, then every few minutes.

A run killed with SIGKILL cannot remove its sandboxes. Each sandbox records its owner process
(:mod:`coding_agent_rl.sandbox.owner`); :class:`OrphanReaper` asks the runtime's backend to
remove those whose owner is gone (``Sandbox.reap_orphans``) once when the runtime starts, then
every ``settings.reap_interval_s`` seconds in a background task that stops with the runtime.
Each pass logs what it removed. A failed pass is logged and does not stop the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from coding_agent_rl import settings
from coding_agent_rl.sandbox import BACKENDS, Sandbox

log = logging.getLogger(__name__)


async def reap_once(backend: type[Sandbox], *, log_none: bool = False) -> dict[str, int]:
    """One pass over ``backend``'s orphans; what it removed (logged; a pass that removed
    nothing only with ``log_none``, as at a start)."""
    try:
        report = await backend.reap_orphans()
    except Exception as e:  # the engine being unreachable is the rollouts' failure to report
        log.warning("orphan reaping on %s failed: %s: %s", backend.backend, type(e).__name__, e)
        return {}
    removed = ", ".join(f"{n} {what}" for what, n in report.items() if n)
    if removed:
        log.info("reaped orphaned %s sandboxes (owner process gone): %s", backend.backend, removed)
    else:
        log.log(
            logging.INFO if log_none else logging.DEBUG,
            "reaped 0 orphaned %s sandboxes",
            backend.backend,
        )
    return report


class OrphanReaper:
    """``await start()`` reaps once and starts the periodic task; ``await stop()`` ends it."""

    def __init__(self, backend: str, interval_s: float | None = None):
        self.backend = BACKENDS.load(backend)
        self.interval_s = settings.current().reap_interval_s if interval_s is None else interval_s
        self.first: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> dict[str, int]:
        self.first = await reap_once(self.backend, log_none=True)
        if self.interval_s > 0:
            self._task = asyncio.create_task(self._every())
        return self.first

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await reap_once(self.backend)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

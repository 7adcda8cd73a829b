"""Watching an asyncio event loop for stalls, and naming the code that blocked it.

A coroutine on the loop beats every ``period`` seconds; a thread checks the beat and, when it is
older than ``limit``, samples the loop thread's stack once per stall. When the loop runs again the
stall is recorded with its length and where the loop thread was (our frames, innermost first).
Work done inline on the loop (parsing, reading a large file) blocks every other rollout of the
process: this is how ``audit-grading`` tells the host was harmed, and by what.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
from typing import Any

MAX_STALLS = 20


def _frames(frame: types.FrameType | None) -> list[str]:
    """The frames of this package (``module:line function``), innermost first."""
    out: list[str] = []
    while frame is not None and len(out) < 64:
        path = frame.f_code.co_filename
        if "coding_agent_rl" in path:
            name = path.rsplit("coding_agent_rl/", 1)[-1]
            out.append(f"{name}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return out


class StallWatch:
    def __init__(self, limit: float, period: float = 0.05):
        self.limit, self.period = limit, period
        self.max_stall_s = 0.0
        # Stalls over the limit: {"seconds", "where" (4 frames), "frames" (all of ours)}
        self.stalls: list[dict[str, Any]] = []
        self._beat = time.monotonic()
        self._sampled: list[str] | None = None
        self._stop = threading.Event()
        self._thread_id = threading.get_ident()

    async def run(self) -> None:
        """Beat until cancelled (start it on the loop being watched)."""
        self._thread_id = threading.get_ident()
        watcher = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        watcher.start()
        try:
            while True:
                t = time.monotonic()
                await asyncio.sleep(self.period)
                stall = time.monotonic() - t - self.period
                self.max_stall_s = max(self.max_stall_s, stall)
                self._beat = time.monotonic()
                if stall > self.limit and len(self.stalls) < MAX_STALLS:
                    frames = self._sampled or []
                    where = " <- ".join(frames[:4]) or "outside coding_agent_rl"
                    self.stalls.append(
                        {"seconds": round(stall, 2), "where": where, "frames": frames}
                    )
                self._sampled = None
        finally:
            self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.limit / 4):
            if self._sampled is None and time.monotonic() - self._beat > self.limit:
                self._sampled = _frames(sys._current_frames().get(self._thread_id))

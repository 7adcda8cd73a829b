"""Per-phase wall-clock timings of one rollout, and a finer per-step profile.

``phases`` are the documented ``timings`` of results.jsonl; ``steps`` (``record["profile"]``)
break them down for ``bench rollout --profile`` (steps may overlap: grading is prepared while
the agent runs).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PHASES = ("sandbox_s", "install_s", "agent_s", "diff_s", "grade_s")


class Timings:
    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.steps: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - t

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            self.steps[name] = self.steps.get(name, 0.0) + time.monotonic() - t

    def as_dict(self) -> dict[str, float]:
        out = {k: round(v, 4) for k, v in self.phases.items()}
        out["total_s"] = round(time.monotonic() - self._t0, 4)
        return out

    def profile(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.steps.items()}

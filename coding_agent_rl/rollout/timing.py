"""Per-phase wall-clock timings of one rollout."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PHASES = ("sandbox_s", "install_s", "agent_s", "diff_s", "grade_s")


class Timings:
    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - t

    def as_dict(self) -> dict[str, float]:
        out = {k: round(v, 4) for k, v in self.phases.items()}
        out["total_s"] = round(time.monotonic() - self._t0, 4)
        return out

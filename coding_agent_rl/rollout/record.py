"""One rollout's record: the line ``results.jsonl`` gets, and ``metadata["rollout_record"]``.

:class:`RolloutRecord` holds the fields every record has as typed attributes, in the order they
have always been written, and the fields only some records have (``routing_key``,
``fail_reason``, ``limit_breach``, ``adapter_errors``, ``artifacts``, ``diff_truncated``,
``infra_stage``, the grader's F2P/P2P counts and tamper evidence, ``turns``,
``num_segments``, ``metrics``, ``timings``, ``profile``, ``agent_cpu_s``, ``retries``, ...) in :attr:`extra`, in
the order they were set. :meth:`RolloutRecord.as_dict` is the line: the same keys and values
as the dict it replaces (schema unchanged, no version bump).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from coding_agent_rl.errors import FailureKind

log = logging.getLogger("coding_agent_rl.rollout.runner")


def event(name: str, sid: str, **fields: Any) -> None:
    """One structured log line per rollout event: ``rollout.<name> sid=... {json fields}``."""
    log.info("rollout.%s sid=%s %s", name, sid, json.dumps(fields, default=str, sort_keys=True))


@dataclasses.dataclass
class RolloutRecord:
    """What happened in one rollout attempt (see rollout/runner.py for the failure policy)."""

    rollout_id: int | str | None
    instance_id: str
    sample_index: int | None
    group_index: int | None
    session_id: str
    reward: float = 0.0
    failure_kind: FailureKind | None = None
    abort_reason: str | None = None
    agent_exit_code: int | None = None
    agent_timed_out: bool | None = None
    # agent_network, grading_network, limits (what the agent and the grader could reach)
    isolation: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def set(self, **fields: Any) -> None:
        """Set fields by name: the typed ones as attributes, any other in :attr:`extra`."""
        for key, value in fields.items():
            if key in _TYPED:
                setattr(self, key, value)
            else:
                self.extra[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in _TYPED else self.extra.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in _TYPED or key in self.extra

    @property
    def metrics(self) -> dict[str, Any]:
        """The record's ``metrics`` (created empty when first asked for)."""
        return self.extra.setdefault("metrics", {})

    def as_dict(self) -> dict[str, Any]:
        """The ``results.jsonl`` line."""
        out = {name: getattr(self, name) for name in _TYPED if name != "extra"}
        out.update(self.extra)
        return out


_TYPED = tuple(f.name for f in dataclasses.fields(RolloutRecord) if f.name != "extra")

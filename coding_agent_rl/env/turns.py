"""Per-turn records of the native loop, the structured per-turn event, and rollout metrics.

Every turn leaves one :class:`TurnRecord` (in ``sample.metadata["turns"]``, one dict per turn)
and one log line ``env.turn sid=<session> {json}``. :func:`turn_metrics` folds the records into
the rollout's ``results.jsonl`` metrics: turns, truncation reason, env retries by type, and
generate / env / loop time.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
from typing import Any

log = logging.getLogger("coding_agent_rl.env")

PREVIEW_MARK = "\n[... {n} characters omitted ...]\n"


def preview(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters: its head and tail around a marker."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return text[:head] + PREVIEW_MARK.format(n=len(text) - head - tail) + text[-tail:]


def _scalars(info: dict[str, Any]) -> dict[str, Any]:
    """The JSON-scalar entries of an env's ``info`` (and short lists of them)."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[str(k)] = v if not isinstance(v, str) else v[:200]
        elif isinstance(v, list) and len(v) <= 16 and all(isinstance(x, (str, int)) for x in v):
            out[str(k)] = v
    return out


@dataclasses.dataclass
class TurnRecord:
    """One turn: one generation and one successful environment step (its retries included)."""

    index: int
    sampled: int = 0  # tokens the policy sampled (loss mask 1)
    observation_tokens: int = 0  # tokens appended for the observation (loss mask 0)
    finish: str = ""  # SGLang's finish reason of the generation
    generate_s: float = 0.0
    env_s: float = 0.0  # env.step, retries and resets included
    loop_s: float = 0.0  # the loop's own work: decoding, encoding, bookkeeping
    retries: int = 0
    retry_types: dict[str, int] = dataclasses.field(default_factory=dict)
    done: bool = False
    action: str = ""  # preview of the decoded model output
    observation: str = ""  # preview of the observation text
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def count_retry(self, error: BaseException) -> None:
        self.retries += 1
        name = type(error).__name__
        self.retry_types[name] = self.retry_types.get(name, 0) + 1

    def set_info(self, info: dict[str, Any]) -> None:
        self.info = _scalars(info)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("generate_s", "env_s", "loop_s"):
            d[key] = round(d[key], 6)
        return d


def turn_event(session: str, record: TurnRecord) -> None:
    """The structured per-turn log line (no previews: those live in the sample)."""
    fields = {
        "turn": record.index,
        "sampled": record.sampled,
        "observation_tokens": record.observation_tokens,
        "finish": record.finish,
        "generate_s": round(record.generate_s, 4),
        "env_s": round(record.env_s, 4),
        "loop_s": round(record.loop_s, 6),
        "retries": record.retries,
        "retry_types": record.retry_types,
        "done": record.done,
    }
    log.info("env.turn sid=%s %s", session, json.dumps(fields, sort_keys=True))


def turn_metrics(turns: list[TurnRecord]) -> dict[str, Any]:
    """Rollout-level figures from the turn records (``results.jsonl`` ``metrics``)."""
    by_type: collections.Counter[str] = collections.Counter()
    for t in turns:
        by_type.update(t.retry_types)
    loop = sorted(t.loop_s for t in turns)
    return {
        "turns": len(turns),
        "tokens_sampled": sum(t.sampled for t in turns),
        "observation_tokens": sum(t.observation_tokens for t in turns),
        "env_retries": sum(t.retries for t in turns),
        "env_retries_by_type": dict(by_type),
        "generate_s": round(sum(t.generate_s for t in turns), 4),
        "env_s": round(sum(t.env_s for t in turns), 4),
        "loop_s_p50": round(loop[len(loop) // 2], 6) if loop else None,
        "loop_s_max": round(loop[-1], 6) if loop else None,
    }

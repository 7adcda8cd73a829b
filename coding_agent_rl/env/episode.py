"""What the native loop is configured with (:class:`LoopConfig`) and what it produces
(:class:`Episode`, turned into a slime Sample by ``sample.py``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from coding_agent_rl.env.turns import TurnRecord
from coding_agent_rl.errors import FailureKind

COMPLETED, TRUNCATED, ABORTED = "completed", "truncated", "aborted"


@dataclasses.dataclass
class LoopConfig:
    max_turns: int = 30
    max_context: int | None = None  # prompt + response tokens (slime: rollout_max_context_len)
    max_response: int | None = None  # response tokens (slime: rollout_max_response_len)
    max_env_retries_per_turn: int = 3
    env_retry_backoff_s: float = 0.25  # doubled per retry, capped at 5 s
    env_step_timeout_s: float | None = None  # guard on async env methods; None: none
    preview_chars: int = 1000  # per action / observation kept in metadata.turns
    stop_on_length: bool = False  # a reply cut at max_new_tokens ends the episode (TRUNCATED)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_env_retries_per_turn < 0:
            raise ValueError("max_env_retries_per_turn must be >= 0")
        for name in ("max_context", "max_response"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or None), got {value}")


@dataclasses.dataclass
class Episode:
    """What the loop produced; ``sample.py`` turns it into a slime Sample."""

    prompt_ids: list[int]
    response_ids: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    turns: list[TurnRecord] = dataclasses.field(default_factory=list)
    status: str = COMPLETED
    end: str = "done"
    reason: str | None = None  # why it was truncated / aborted, in words
    failure_kind: FailureKind | None = None  # infra | data, for aborted episodes
    weight_versions: list[str] = dataclasses.field(default_factory=list)
    reset_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    reset_s: float = 0.0
    reset_retries: dict[str, int] = dataclasses.field(default_factory=dict)  # by error type
    # Images sent to SGLang with the ids, and per-turn processor outputs merged once.
    image_data: list[Any] = dataclasses.field(default_factory=list)
    multimodal_train_chunks: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def truncation_reason(self) -> str | None:
        return self.end if self.status == TRUNCATED else None

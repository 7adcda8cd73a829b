"""The training sample, field-compatible with slime's ``Sample``.

Invariants (checked by :meth:`Sample.check`):

* ``tokens`` = prompt tokens + response tokens; the response is the last ``response_length``.
* ``len(loss_mask) == len(rollout_log_probs) == response_length``.
* ``loss_mask[i] == 1`` only on tokens the policy sampled; ``rollout_log_probs[i] == 0.0``
  where the mask is 0.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | str | None = None
    prompt: str | list[dict[str, Any]] = ""
    tokens: list[int] = dataclasses.field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Status = Status.PENDING
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    session_id: str | None = None
    weight_versions: list[str] = dataclasses.field(default_factory=list)
    non_generation_time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["schema_version"] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "status" in kwargs:
            kwargs["status"] = Status(kwargs["status"])
        return cls(**kwargs)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant."""
        n = self.response_length
        if self.loss_mask is None or self.rollout_log_probs is None:
            raise ValueError("loss_mask and rollout_log_probs must be set")
        if not (len(self.loss_mask) == len(self.rollout_log_probs) == n):
            raise ValueError(
                f"misaligned sample: loss_mask={len(self.loss_mask)} "
                f"rollout_log_probs={len(self.rollout_log_probs)} response_length={n}"
            )
        if n > len(self.tokens):
            raise ValueError(f"response_length {n} exceeds tokens {len(self.tokens)}")
        for m, lp in zip(self.loss_mask, self.rollout_log_probs, strict=True):
            if m not in (0, 1):
                raise ValueError(f"loss_mask holds {m!r}, not 0/1")
            if m == 0 and lp != 0.0:
                raise ValueError("masked token carries a non-zero log prob")


def aborted_sample(
    base: Sample, reason: str, failure_kind: str = "infra", **metadata: Any
) -> Sample:
    """The placeholder slime drops from training: one masked token, ``remove_sample=True``."""
    meta = dict(base.metadata)
    meta.update(metadata, abort_reason=reason, failure_kind=failure_kind)
    return dataclasses.replace(
        base,
        rollout_id=base.rollout_id if base.rollout_id is not None else base.index,
        tokens=[0, 0],
        response="",
        response_length=1,
        loss_mask=[0],
        rollout_log_probs=[0.0],
        reward=0.0,
        remove_sample=True,
        status=Status.ABORTED,
        metadata=meta,
    )

"""A rollout's training samples from its recorded turns, and the record's counts of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import InfraFailure
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.record import RolloutRecord
from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.trajectory.turn import Turn
from coding_agent_rl.types import Sample, Status


def rollout_samples(
    config: RolloutConfig,
    decode: Callable[[list[int]], str] | None,
    row: TaskRow,
    base: Sample,
    sid: str,
    turns: list[Turn],
    record: RolloutRecord,
    reward: float,
    evaluation: bool,
) -> list[Sample]:
    """The rollout's samples from its turns (``evaluation``: one scored sample, as slime's eval
    path wants), and the record's turn, segment and token counts."""
    base = dataclasses.replace(
        base,
        session_id=base.session_id or sid,
        metadata={
            **base.metadata,
            "instance_id": row.instance_id,
            "failure_kind": record.failure_kind,
            **({"limit_breach": record.get("limit_breach")} if "limit_breach" in record else {}),
        },
    )
    samples = build_samples(
        turns,
        base,
        reward=reward,
        reward_mode=config.reward_mode,
        max_context=config.max_context,
        max_response=config.max_response,
        decode=decode,
    )
    trained = sum(sum(s.loss_mask or []) for s in samples)
    record.set(
        num_segments=len(samples),
        turns=len(turns),
        metrics={
            # sampled by the policy here (a branch's replayed prefix was sampled in its root)
            "tokens_generated": sum(len(t.output_ids) for t in turns if t.replay is None),
            "tokens_trained": trained,
            "truncated": sum(s.status == Status.TRUNCATED for s in samples),
            "truncation_reason": next(
                (
                    s.metadata.get("truncation_reason") or "length"
                    for s in samples
                    if s.status == Status.TRUNCATED
                ),
                None,
            ),
        },
    )
    if evaluation:
        # slime's eval path wants one scored sample per prompt.
        final = samples[-1] if samples else base
        return [dataclasses.replace(final, reward=reward)]
    if not samples:
        raise InfraFailure(
            "no trainable sample (no sampled token survived the context budget)",
            stage="internal",
        )
    return samples

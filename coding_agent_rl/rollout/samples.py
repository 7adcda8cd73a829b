"""A rollout's training samples from its recorded turns, and the record's counts of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import NothingTrainable, TaskDataError
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
        raise _nothing_trainable(turns, config.max_context)
    return samples


def _nothing_trainable(turns: list[Turn], max_context: int | None) -> Exception:
    """Why a rollout with turns has no sample: the task's first prompt does not fit (data), or
    what the policy did since left nothing to train (its own outcome: a branch whose turns after
    the replayed prefix sampled nothing, tool output that filled the context)."""
    own = [t for t in turns if t.replay is None]
    first = own[0] if own and own[0] is turns[0] else None
    if first is not None and max_context is not None and len(first.prompt_ids) >= max_context:
        return TaskDataError(
            f"the first prompt ({len(first.prompt_ids)} tokens) does not fit "
            f"max_context {max_context}"
        )
    return NothingTrainable(
        "no trainable sample: no token the policy sampled here survived the context budget"
    )

"""Reward across the sibling samples of one rollout, and GRPO advantages that count rollouts once.

Modes (``reward_mode``):

* ``full`` (default, slime's behaviour): every sibling carries the rollout's reward.
* ``split``: each of the K siblings carries ``reward / K``, so the rollout's total is the reward.

Either way ``metadata["rollout_reward"]`` holds the undivided reward. A trainer that normalises
per sample over-counts a rollout that split into K samples (it enters the group mean and std K
times); :func:`grpo_advantages` instead computes one advantage per rollout (deduplicated by
``rollout_id``) and gives it to each of the rollout's samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from coding_agent_rl.types import Sample

RewardMode = Literal["full", "split"]
REWARD_MODES = ("full", "split")


def assign_reward(
    samples: Sequence[Sample], reward: float | None, mode: RewardMode = "full"
) -> None:
    """Set ``reward`` and ``metadata.rollout_reward`` on every sibling (in place)."""
    if mode not in REWARD_MODES:
        raise ValueError(f"reward_mode must be one of {REWARD_MODES}, not {mode!r}")
    k = len(samples)
    for s in samples:
        s.metadata["rollout_reward"] = reward
        s.metadata["reward_mode"] = mode
        if reward is None:
            s.reward = None
        else:
            s.reward = float(reward) / k if mode == "split" else float(reward)


def _rollout_reward(sample: Sample) -> float:
    r = sample.metadata.get("rollout_reward", sample.reward)
    if r is None:
        raise ValueError(f"sample {sample.index} (rollout {sample.rollout_id}) has no reward")
    if isinstance(r, dict):
        raise ValueError("grpo_advantages needs scalar rewards")
    return float(r)


def _group_of(sample: Sample, key: str) -> Any:
    if hasattr(sample, key):
        return getattr(sample, key)
    return sample.metadata.get(key)


def grpo_advantages(
    samples: Sequence[Sample],
    *,
    group_key: str = "group_index",
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """Per sample: ``(r - mean) / (std + eps)`` of its rollout, over the rollouts of its group.

    ``group_key`` names a Sample attribute or a metadata key. Each rollout (``rollout_id``, else
    the sample itself) counts once, with ``metadata.rollout_reward`` (else ``reward``).
    ``std`` is the sample standard deviation (n - 1); a group of one rollout gets advantage 0.
    """
    groups: dict[Any, dict[Any, float]] = {}
    rollout_of: list[tuple[Any, Any]] = []
    for i, s in enumerate(samples):
        g = _group_of(s, group_key)
        rid = s.rollout_id if s.rollout_id is not None else ("sample", i)
        r = _rollout_reward(s)
        seen = groups.setdefault(g, {})
        if rid in seen and not math.isclose(seen[rid], r, rel_tol=1e-9, abs_tol=1e-12):
            raise ValueError(f"rollout {rid!r} carries two rollout rewards: {seen[rid]} and {r}")
        seen[rid] = r
        rollout_of.append((g, rid))
    stats: dict[Any, tuple[float, float]] = {}
    for g, rewards in groups.items():
        values = list(rewards.values())
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        stats[g] = (mean, math.sqrt(var))
    out = []
    for g, rid in rollout_of:
        mean, std = stats[g]
        adv = groups[g][rid] - mean
        out.append(adv / (std + eps) if normalize_std else adv)
    return out

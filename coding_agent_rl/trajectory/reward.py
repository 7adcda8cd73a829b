"""Reward across the sibling samples of one rollout, and group-normalised rewards that count each
rollout once.

``reward_mode`` ``full`` (every sibling carries the reward) or ``split`` (reward / K);
:func:`normalized_rewards` normalises per group over rollouts, not samples, and leaves aborted
rollouts out; :func:`grpo_advantages` is the plain GRPO case. Details:
docs/modules/trajectory.md.
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


def reward_value(sample: Any, reward_key: str | None = None) -> Any:
    """The sample's own reward as slime reads it (``reward``, or ``reward[reward_key]``)."""
    reward = sample.reward
    if reward_key and isinstance(reward, dict):
        return reward.get(reward_key)
    return reward


def rollout_reward(sample: Any, reward_key: str | None = None) -> float:
    """The undivided reward of the sample's rollout: ``metadata.rollout_reward``, else its own."""
    meta = sample.metadata or {}
    r = meta.get("rollout_reward")
    if r is None:
        r = reward_value(sample, reward_key)
    if r is None:
        raise ValueError(f"sample {sample.index} (rollout {sample.rollout_id}) has no reward")
    if isinstance(r, dict):
        raise ValueError(f"sample {sample.index}: a dict reward needs a reward key")
    return float(r)


def is_dropped(sample: Any) -> bool:
    """Aborted or removed: trained on nothing, counted in no group statistic."""
    status = getattr(sample, "status", None)
    return bool(sample.remove_sample) or getattr(status, "value", status) == "aborted"


def _group_of(sample: Any, key: str) -> Any:
    if hasattr(sample, key):
        return getattr(sample, key)
    return (sample.metadata or {}).get(key)


def normalized_rewards(
    samples: Sequence[Any],
    *,
    center: bool = True,
    scale: bool = True,
    rloo: bool = False,
    split_by_mode: bool = False,
    group_key: str = "group_index",
    reward_key: str | None = None,
    eps: float = 1e-6,
) -> list[float]:
    """Per sample, in order: its rollout's reward normalised over the rollouts of its group.

    ``center`` subtracts the group mean, ``scale`` divides by ``std + eps``, ``rloo`` multiplies
    the centred value by n / (n - 1). Each rollout (``rollout_id``, else the sample itself) counts
    once. With ``split_by_mode`` a sample whose ``metadata.reward_mode`` is ``split`` gets its
    rollout's value / K, K = the rollout's samples in ``samples``. Dropped rollouts
    (:func:`is_dropped`) get 0 and are left out of the statistics.
    """
    keys: list[tuple[Any, Any]] = []
    groups: dict[Any, dict[Any, float]] = {}
    dropped: set[tuple[Any, Any]] = set()
    count: dict[tuple[Any, Any], int] = {}
    for i, s in enumerate(samples):
        g = _group_of(s, group_key)
        rid = s.rollout_id if s.rollout_id is not None else ("sample", i)
        key = (g, rid)
        keys.append(key)
        count[key] = count.get(key, 0) + 1
        if is_dropped(s):
            dropped.add(key)
            continue
        r = rollout_reward(s, reward_key)
        seen = groups.setdefault(g, {})
        if rid in seen and not math.isclose(seen[rid], r, rel_tol=1e-9, abs_tol=1e-12):
            raise ValueError(f"rollout {rid!r} carries two rollout rewards: {seen[rid]} and {r}")
        seen[rid] = r
    value: dict[tuple[Any, Any], float] = {}
    for g, rewards in groups.items():
        live = {rid: r for rid, r in rewards.items() if (g, rid) not in dropped}
        n = len(live)
        if not n:
            continue
        mean = sum(live.values()) / n if center else 0.0
        std = math.sqrt(sum((r - mean) ** 2 for r in live.values()) / (n - 1)) if n > 1 else 0.0
        for rid, r in live.items():
            v = r - mean
            if scale:
                v = v / (std + eps)
            if rloo:
                v = v * n / (n - 1) if n > 1 else 0.0
            value[(g, rid)] = v
    out = []
    for s, key in zip(samples, keys, strict=True):
        v = value.get(key, 0.0)
        if split_by_mode and (s.metadata or {}).get("reward_mode") == "split":
            v /= count[key]
        out.append(v)
    return out


def grpo_advantages(
    samples: Sequence[Sample],
    *,
    group_key: str = "group_index",
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """Per sample: ``(r - mean) / (std + eps)`` of its rollout, over the rollouts of its group.

    ``group_key`` names a Sample attribute or a metadata key. Each rollout (``rollout_id``, else
    the sample itself) counts once, with ``metadata.rollout_reward`` (else ``reward``); every
    sibling gets the rollout's advantage. A group of one rollout gets advantage 0.
    """
    return normalized_rewards(samples, scale=normalize_std, group_key=group_key, eps=eps)

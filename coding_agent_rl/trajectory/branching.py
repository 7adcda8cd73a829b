"""Tree rollouts: where to branch, the root's samples per stretch, and step-level advantages."""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from coding_agent_rl.trajectory.turn import Turn


def turn_surprisal(turn: Turn) -> float:
    """Mean negative logprob of the turn's sampled tokens (0 for an empty or replayed turn)."""
    if turn.replay is not None or not turn.output_logprobs:
        return 0.0
    return -sum(turn.output_logprobs) / len(turn.output_logprobs)


def pick_branch_turns(turns: Sequence[Turn], branches: int) -> list[int]:
    """``branches`` turns to branch at (a turn k: the first k turns replayed, turn k resampled),
    the most surprising first; candidates are turns 1..n-1 that were sampled (not replayed).
    Fewer than asked when the rollout has fewer candidates; ties go to the earlier turn."""
    candidates = [t for t in turns if t.index > 0 and t.replay is None and t.output_ids]
    ranked = sorted(candidates, key=lambda t: (-turn_surprisal(t), t.index))
    return [t.index for t in ranked[:branches]]


def stretches(branch_turns: Sequence[int], n_turns: int) -> list[tuple[int, int]]:
    """The root's turns cut at the branch points: ``[(0, k1), (k1, k2), ..., (k_last, n)]``."""
    cuts = sorted({k for k in branch_turns if 0 < k < n_turns})
    bounds = [0, *cuts, n_turns]
    return list(itertools.pairwise(bounds))


def in_stretch(lo: int, hi: int) -> Callable[[Turn], bool]:
    """A ``build_samples(train=...)`` filter for the root's turns ``lo <= index < hi``."""
    return lambda t: lo <= t.index < hi


def tree_values(
    root_reward: float, branches: Sequence[tuple[int, float]]
) -> Callable[[int], float]:
    """``V(k)``: the mean reward of the root and the branches at ``k' >= k`` (docs/trees.md)."""

    def value(k: int) -> float:
        rewards = [root_reward, *(r for at, r in branches if at >= k)]
        return sum(rewards) / len(rewards)

    return value


def _meta(sample: Any) -> dict[str, Any]:
    return getattr(sample, "metadata", None) or {}


Rewards = tuple[list[float], list[float]]


def tree_rewards(
    args: Any, samples: Sequence[Any], flat: Callable[[Any, Sequence[Any]], Rewards]
) -> Rewards:
    """slime's ``(raw_rewards, rewards)`` where every sample of a tree gets its step-level
    advantage (docs/trees.md) and samples outside any tree go through ``flat`` (the group
    normalisation of ``generate.post_process_rewards``), in order.

    A tree's rollouts are recognised by ``metadata["tree_id"]`` (a tree without a branch in
    ``samples`` is a plain rollout of its group); each rollout's reward is its
    ``metadata["rollout_reward"]`` (undivided); a root sample's stretch is
    ``metadata["tree_stretch"]`` (``[lo, hi]``; a sample without one takes the root's whole
    advantage ``r_root - V(0)``). A dropped rollout (aborted) gets 0 and is left out of ``V``.
    """
    from coding_agent_rl.trajectory.reward import is_dropped, rollout_reward

    samples = list(samples)
    key = getattr(args, "reward_key", None)
    branched = {  # trees with a live branch here; the others are plain rollouts of their group
        _meta(s)["tree_id"]
        for s in samples
        if _meta(s).get("parent_rollout_id") is not None and not is_dropped(s)
    }
    in_tree = [_meta(s).get("tree_id") in branched for s in samples]
    raw, rewards = [0.0] * len(samples), [0.0] * len(samples)
    others = [i for i, t in enumerate(in_tree) if not t]
    if others:
        o_raw, o_rewards = flat(args, [samples[i] for i in others])
        for i, a, b in zip(others, o_raw, o_rewards, strict=True):
            raw[i], rewards[i] = a, b
    trees: dict[Any, list[int]] = collections.defaultdict(list)
    for i, t in enumerate(in_tree):
        if t:
            trees[_meta(samples[i])["tree_id"]].append(i)
    for tree_id, members in trees.items():
        root_reward: float | None = None
        branch_reward: dict[Any, tuple[int, float]] = {}
        for i in members:
            s = samples[i]
            if is_dropped(s):  # 0, and no reward needed (as in post_process_rewards)
                continue
            raw[i] = rollout_reward(s, key)
            meta = _meta(s)
            if meta.get("parent_rollout_id") is None:
                root_reward = raw[i]
            else:
                branch_reward[s.rollout_id] = (int(meta["branch_turn"]), raw[i])
        if root_reward is None:  # the root was dropped: nothing to compare against
            continue
        value = tree_values(root_reward, list(branch_reward.values()))
        by_branch = {rid: r - value(k) for rid, (k, r) in branch_reward.items()}
        # the root's stretches as it was cut (a branch point whose branch was dropped included)
        los = [
            int(_meta(samples[i])["tree_stretch"][0]) for i in members if _is_stretch(samples[i])
        ]
        last = max(los, default=0)
        for i in members:
            s = samples[i]
            if is_dropped(s):
                continue
            meta = _meta(s)
            if meta.get("parent_rollout_id") is not None:
                rewards[i] = by_branch[s.rollout_id]
                continue
            stretch = meta.get("tree_stretch")
            if stretch is None:  # the root uncut: its whole advantage
                rewards[i] = root_reward - value(0)
                continue
            lo, hi = int(stretch[0]), int(stretch[1])
            rewards[i] = (root_reward if lo == last else value(hi)) - value(lo)
        if any(math.isnan(rewards[i]) for i in members):
            raise ValueError(f"tree {tree_id!r}: NaN advantage")
    return raw, rewards


def _is_stretch(sample: Any) -> bool:
    meta = _meta(sample)
    return meta.get("parent_rollout_id") is None and meta.get("tree_stretch") is not None

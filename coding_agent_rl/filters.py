"""slime dynamic-sampling filters for groups of coding rollouts
(``--dynamic-sampling-filter-path coding_agent_rl.filters.check_reward_nonzero_std``).

A group item from :func:`coding_agent_rl.generate.generate` is a list of one rollout's
siblings; each counts once, with its rollout's undivided reward (split rewards and the number
of siblings do not change the decision). Plain ``Sample`` items are read as slime reads them.
slime's own filters work on our groups too (each item answers ``get_reward_value``), but only
these also accept plain lists of siblings.
"""

from __future__ import annotations

import statistics
from typing import Any

from coding_agent_rl.siblings import rollout_reward_value


def _output(keep: bool, reason: str | None, fallback: bool) -> Any:
    try:  # slime's own result type when slime is the caller (never imported at module load)
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    except ImportError:
        return keep
    out = DynamicFilterOutput(keep=keep, reason=reason)
    if fallback:
        out.keep_when_insufficient = True
    return out


def _decide(args: Any, group: list[Any], fallback: bool) -> Any:
    rewards = [float(rollout_reward_value(item, args)) for item in group]
    keep = len(rewards) > 1 and statistics.stdev(rewards) > 1e-6
    reason = None if keep else f"zero_std_{round(rewards[0], 1) if rewards else 'empty'}"
    return _output(keep, reason, fallback)


def check_reward_nonzero_std(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """Keep a group whose rollouts' rewards differ (slime's filter of the same name)."""
    return _decide(args, samples, fallback=False)


def check_reward_nonzero_std_with_fallback(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """As :func:`check_reward_nonzero_std`, but kept when the batch would fall short."""
    return _decide(args, samples, fallback=True)

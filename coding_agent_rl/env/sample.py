"""One episode -> one slime Sample: ``tokens`` = prompt + response, loss mask 1 exactly on the
sampled tokens, observation tokens 0 with logprob 0, ``weight_versions``, ``metadata.turns``;
with images, ``multimodal_inputs`` (every image, prompt order) and ``multimodal_train_inputs``
(the per-turn processor tensors concatenated once per key).

The sample handed in by the caller is filled in place (slime's own multi-turn rollout does the
same) and its status is a member of the *caller's* ``Status`` enum: ``type(sample).Status`` when
its class has one (slime compares members, so a member of another enum never matches), else ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coding_agent_rl.env.episode import Episode
from coding_agent_rl.env.turns import turn_metrics
from coding_agent_rl.errors import FailureKind
from coding_agent_rl.multimodal.buffer import merge_chunks
from coding_agent_rl.types import Sample, Status, aborted_sample

SEGMENT = "final"  # the whole rollout is one sample; the CLI path's label for the main chain


def status_member(sample: Any, value: str) -> Any:
    """The member named ``value`` (``"completed"`` ...) of the caller's ``Status`` enum."""
    cls = getattr(type(sample), "Status", None) or Status
    try:
        return cls(value)
    except ValueError:
        return cls[value.upper()]


def episode_metadata(episode: Episode) -> dict[str, Any]:
    """What the sample's ``metadata`` gets from the episode."""
    return {
        "turns": [t.as_dict() for t in episode.turns],
        "num_turns": len(episode.turns),
        "end_reason": episode.end,
        "truncation_reason": episode.truncation_reason,
        "env_retries": sum(t.retries for t in episode.turns),
        "segment": SEGMENT,
        "agent": "native",
    }


def fill_sample(
    sample: Any,
    episode: Episode,
    *,
    decode: Callable[[list[int]], str],
    reward: float | None = None,
    metadata: dict[str, Any] | None = None,
) -> Any:
    """Write ``episode`` into ``sample`` (in place) and check slime's invariants."""
    if episode.status == "aborted":
        raise ValueError("an aborted episode becomes an aborted placeholder, not a sample")
    sample.tokens = [*episode.prompt_ids, *episode.response_ids]
    sample.response_length = len(episode.response_ids)
    sample.loss_mask = list(episode.loss_mask)
    sample.rollout_log_probs = list(episode.logprobs)
    sample.response = decode(episode.response_ids)
    sample.status = status_member(sample, episode.status)
    if hasattr(sample, "weight_versions"):
        sample.weight_versions = list(sample.weight_versions or []) + episode.weight_versions
    if episode.image_data:  # slime's fields; per-turn tensors merged here, once per key
        sample.multimodal_inputs = {"images": list(episode.image_data)}
        sample.multimodal_train_inputs = merge_chunks(episode.multimodal_train_chunks)
    if reward is not None:
        sample.reward = reward
    sample.metadata = {**(sample.metadata or {}), **episode_metadata(episode), **(metadata or {})}
    Sample.check(sample)  # slime's checks, on whichever Sample class the caller uses
    if not any(sample.loss_mask):
        raise ValueError("the episode sampled no token")
    return sample


def abort_sample(sample: Any, reason: str, kind: FailureKind, **metadata: Any) -> Any:
    """slime's aborted placeholder (``remove_sample=True``) with the caller's status class."""
    out = aborted_sample(sample, reason, kind, **metadata)
    out.status = status_member(sample, "aborted")
    return out


def rollout_metrics(episode: Episode) -> dict[str, Any]:
    """``results.jsonl`` ``metrics`` of a native rollout."""
    metrics = turn_metrics(episode.turns)
    metrics.update(
        tokens_generated=metrics["tokens_sampled"],
        tokens_trained=sum(episode.loss_mask),
        truncation_reason=episode.truncation_reason,
        end_reason=episode.end,
        reset_s=round(episode.reset_s, 4),
        reset_retries=episode.reset_retries,
    )
    return metrics

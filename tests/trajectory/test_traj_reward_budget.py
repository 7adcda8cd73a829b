"""Reward modes, rollout-deduplicated GRPO advantages, and the context/response budget rules."""

from __future__ import annotations

import math

import pytest
from support.traj_sim import Recorder

from coding_agent_rl.trajectory import assign_reward, build_samples, grpo_advantages
from coding_agent_rl.types import Sample, Status


def session_with_three_segments() -> Recorder:
    rec = Recorder()
    main = rec.main()
    rec.call(main, tools=[("Task", "w900")])
    rec.tool_result(main, rec.subagent("w900", steps=1))
    main = rec.compact(main)
    rec.call(main, tools=[("Bash", "w901")])
    rec.tool_result(main)
    rec.call(main)
    return rec


@pytest.mark.parametrize(("mode", "each"), [("full", 0.9), ("split", 0.3)])
def test_reward_modes(mode, each):
    rec = session_with_three_segments()
    samples = build_samples(rec.turns, Sample(index=1), reward=0.9, reward_mode=mode)
    assert len(samples) == 3
    assert all(math.isclose(s.reward, each) for s in samples)
    assert all(s.metadata["rollout_reward"] == 0.9 for s in samples)
    assert all(s.metadata["reward_mode"] == mode for s in samples)


def test_reward_none_is_left_for_the_reward_model():
    rec = session_with_three_segments()
    samples = build_samples(rec.turns, Sample(index=1), reward=None)
    assert all(s.reward is None and s.metadata["rollout_reward"] is None for s in samples)
    with pytest.raises(ValueError, match="reward_mode"):
        assign_reward(samples, 1.0, "mean")


def _rollout(group, rid, reward, k, mode):
    samples = [Sample(group_index=group, index=rid, rollout_id=rid) for _ in range(k)]
    assign_reward(samples, reward, mode)
    return samples


@pytest.mark.parametrize("mode", ["full", "split"])
def test_grpo_advantages_count_each_rollout_once(mode):
    samples = (
        _rollout(0, "a", 1.0, 3, mode)  # split into 3 samples
        + _rollout(0, "b", 0.0, 1, mode)
        + _rollout(0, "c", 0.0, 2, mode)
        + _rollout(1, "d", 5.0, 2, mode)  # another group, alone in it
    )
    adv = grpo_advantages(samples)
    mean = 1 / 3
    std = math.sqrt(((1 - mean) ** 2 + 2 * mean**2) / 2)
    want_a, want_bc = (1 - mean) / (std + 1e-6), (0 - mean) / (std + 1e-6)
    assert adv[:3] == pytest.approx([want_a] * 3)
    assert adv[3:6] == pytest.approx([want_bc] * 3)
    assert adv[6:] == [0.0, 0.0]
    # per-sample normalisation (what a trainer does without dedup) gives a different answer
    per_sample = [1.0] * 3 + [0.0] * 3
    naive_mean = sum(per_sample) / 6
    assert not math.isclose(naive_mean, mean)


def test_grpo_advantages_group_key_in_metadata_and_conflicts():
    a = _rollout(None, "a", 1.0, 2, "full")
    b = _rollout(None, "b", 3.0, 1, "full")
    for s in a + b:
        s.metadata["prompt_id"] = "p"
    adv = grpo_advantages(a + b, group_key="prompt_id", normalize_std=False)
    assert adv == [-1.0, -1.0, 1.0]
    bad = _rollout(0, "x", 1.0, 1, "full") + _rollout(0, "x", 2.0, 1, "full")
    with pytest.raises(ValueError, match="two rollout rewards"):
        grpo_advantages(bad)


def test_max_context_cuts_and_drops():
    rec = session_with_three_segments()
    full = build_samples(rec.turns, Sample(index=1), reward=1.0)
    longest = max(len(s.tokens) for s in full)
    limit = longest - 3
    cut = build_samples(rec.turns, Sample(index=1), reward=1.0, max_context=limit)
    assert len(cut) == len(full)
    for before, after in zip(full, cut, strict=True):
        after.check()
        assert len(after.tokens) <= limit
        assert after.tokens == before.tokens[: len(after.tokens)]
        if len(before.tokens) > limit:
            assert after.status == Status.TRUNCATED
            assert after.metadata["truncation_reason"] == "context"
            assert after.loss_mask[-1] == 1  # no trailing untrained tokens
        else:
            assert after.status == before.status
    # a budget below every sample's first trained token drops them all
    first_trained = min(len(s.tokens) - s.response_length for s in full)
    assert build_samples(rec.turns, Sample(index=1), reward=1.0, max_context=first_trained) == []


def test_max_response_cut_lands_before_a_tool_result():
    rec = Recorder()
    main = rec.main()
    rec.call(main, tools=[("Bash", "w900")])
    rec.tool_result(main, "w901 w902 w903 w904 w905 w906")
    rec.call(main)
    (full,) = build_samples(rec.turns, Sample(index=1), reward=1.0)
    first_out = len(rec.turns[0].output_ids)
    (s,) = build_samples(rec.turns, Sample(index=1), reward=1.0, max_response=first_out + 4)
    s.check()
    assert s.response_length == first_out  # the cut fell in the tool result: trimmed back
    assert s.metadata["truncation_reason"] == "response" and s.status == Status.TRUNCATED
    assert s.metadata["trained_turns"] == [[0, len(rec.turns[0].prompt_ids), first_out]]
    assert full.response_length > s.response_length

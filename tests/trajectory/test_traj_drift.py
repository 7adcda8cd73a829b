"""Realignment and fork rules, including the two bugs reported against slime's REALIGN."""

from __future__ import annotations

from support.traj_sim import SYSTEM, USER, Recorder, turn

from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.trajectory.drift import Drift, classify
from coding_agent_rl.types import Sample


def two_turns(out0, prompt1, out1, *, parent=0):
    t0 = turn(0, [SYSTEM, USER], [1, 2, 3], out0, content="first")
    history = [SYSTEM, USER, t0.assistant, {"role": "user", "content": "more"}]
    t1 = turn(1, history, prompt1, out1, parent=parent, content="second")
    return [t0, t1]


def test_classify_kinds():
    assert classify([1, 2], [3, 4], [1, 2, 3, 4, 5]) == (Drift.EXTEND, 4)
    assert classify([1, 2], [3, 4], [1, 2, 3, 9, 5]) == (Drift.REALIGN, 3)
    assert classify([1, 2], [3, 4], [1, 9, 3, 4, 5]) == (Drift.FORK, 1)  # before the response
    assert classify([1, 2], [3, 4], [1, 2, 3], realign_max=1) == (Drift.REALIGN, 3)
    assert classify([1, 2], [3, 4, 5, 6], [1, 2, 3, 0], realign_max=2) == (Drift.FORK, 3)


def test_realign_gates_on_replaced_span_not_on_new_output_length():
    """slime bug 1: a 1-token stop mismatch must realign even when the NEW output is long."""
    out0 = [10, 11, 12, 13, 99]  # 99: the stop token the model sampled
    long_out = list(range(200, 2200))  # 2,000 new tokens
    turns = two_turns(out0, [1, 2, 3, 10, 11, 12, 13, 98, 7, 8], long_out)  # 98: re-rendered stop
    samples = build_samples(turns, Sample(index=0), reward=1.0, realign_max=8)
    assert len(samples) == 1  # realigned, not forked
    s = samples[0]
    s.check()
    assert s.tokens == turns[1].prompt_ids + long_out
    assert s.metadata["realigned_tokens"] == 1


def test_realign_refused_when_replaced_span_is_long_even_if_new_output_is_short():
    out0 = list(range(10, 40))  # 30 sampled tokens
    prompt1 = [1, 2, 3, 10, 11] + [0] * 28 + [7]  # diverges after 2 of them: 28 would be replaced
    turns = two_turns(out0, prompt1, [5, 99])  # the new output is tiny
    samples = build_samples(turns, Sample(index=0), reward=1.0, realign_max=8)
    assert len(samples) == 2  # fork: nothing sampled is overwritten
    assert samples[0].tokens == [1, 2, 3, *out0]
    assert sum(samples[0].loss_mask) == 30
    assert samples[1].tokens == [*prompt1, 5, 99]
    assert samples[1].response_length == 2


def test_realign_overwrites_only_from_the_divergence_point():
    """slime bug 2: sampled tokens before the divergence stay in the stream AND stay trained."""
    out0 = [10, 11, 12, 13, 99]
    prompt1 = [1, 2, 3, 10, 11, 12, 55, 56, 7]  # diverges at the 4th output token
    turns = two_turns(out0, prompt1, [20, 21, 99])
    (s,) = build_samples(turns, Sample(index=0), reward=1.0, realign_max=8)
    s.check()
    assert s.tokens == [*prompt1, 20, 21, 99]
    prompt_len = len(s.tokens) - s.response_length
    assert prompt_len == 3
    # 10 11 12 trained (kept), 55 56 7 are the prompt's own tokens (0), then the new output
    assert s.loss_mask == [1, 1, 1, 0, 0, 0, 1, 1, 1]
    assert s.rollout_log_probs[:3] == turns[0].output_logprobs[:3]
    assert s.rollout_log_probs[3:6] == [0.0, 0.0, 0.0]
    assert s.rollout_log_probs[6:] == turns[1].output_logprobs
    assert s.metadata["realigned_tokens"] == 2
    assert s.metadata["trained_turns"] == [[0, 3, 3], [1, 9, 3]]


def test_realign_max_zero_forks_on_any_mismatch():
    out0 = [10, 11, 99]
    turns = two_turns(out0, [1, 2, 3, 10, 11, 98, 7], [20, 99])
    samples = build_samples(turns, Sample(index=0), reward=1.0, realign_max=0)
    assert [sum(s.loss_mask) for s in samples] == [3, 2]


def test_fork_before_last_response_starts_a_sample_whose_history_is_prompt():
    turns = two_turns([10, 11, 99], [1, 9, 3, 10, 11, 99, 7], [20, 99])
    first, second = build_samples(turns, Sample(index=0), reward=1.0)
    assert first.metadata["segment"] == second.metadata["segment"] == "final"
    assert second.tokens == [1, 9, 3, 10, 11, 99, 7, 20, 99]
    assert second.response_length == 2 and second.loss_mask == [1, 1]


def test_message_routed_turn_that_extends_joins_the_chain():
    """No parent (full re-render) but same history and extending tokens: still one sample."""
    turns = two_turns([10, 11, 99], [1, 2, 3, 10, 11, 99, 7], [20, 99], parent=None)
    (s,) = build_samples(turns, Sample(index=0), reward=1.0)
    assert s.tokens == [1, 2, 3, 10, 11, 99, 7, 20, 99]
    assert s.loss_mask == [1, 1, 1, 0, 1, 1]


def test_message_routed_turn_that_does_not_extend_opens_its_own_chain():
    """A re-rendered history with different tokens: the old chain is a wipe, not a duplicate."""
    turns = two_turns([10, 11, 12, 13, 99], [1, 5, 3, 10, 11, 12, 13, 99, 7], [20, 99], parent=None)
    wipe, final = build_samples(turns, Sample(index=0), reward=1.0)
    assert (wipe.metadata["segment"], final.metadata["segment"]) == ("wipe", "final")
    assert sum(wipe.loss_mask) == 5 and sum(final.loss_mask) == 2


def test_a_re_rendered_stop_token_costs_one_trained_token_not_a_sample():
    rec = Recorder()
    main = rec.main()
    for realign in (False, True, False):
        rec.call(main, tools=[("Bash", rec.words(2))])
        rec.tool_result(main)
        if realign:
            rec.call(main, realign_stop=True)  # the adapter wrote another stop token for turn 1
            main.add({"role": "user", "content": rec.words(1)})
    rec.call(main)
    (s,) = build_samples(rec.turns, Sample(index=0), reward=1.0)
    assert rec.realigned == {1}
    assert s.metadata["realigned_tokens"] == 1
    spans = {j: n for j, _, n in s.metadata["trained_turns"]}
    assert spans[1] == len(rec.turns[1].output_ids) - 1
    assert all(spans[t.index] == len(t.output_ids) for t in rec.turns if t.index != 1)

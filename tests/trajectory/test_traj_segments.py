"""Segment labels (subagent, wipe, final, aux) on sessions shaped like real Claude Code runs."""

from __future__ import annotations

import pytest
from support.traj_sim import Recorder

from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.types import Sample, Status


def labels(samples):
    return [s.metadata["segment"] for s in samples]


def trained_turns(sample):
    return [j for j, _, _ in sample.metadata["trained_turns"]]


def step(rec, conv, **kw):
    t = rec.call(conv, tools=[("Bash", rec.words(2))], **kw)
    rec.tool_result(conv)
    return t


def test_linear_run_is_one_final_sample():
    rec = Recorder(drop_think=True)
    main = rec.main()
    for _ in range(30):
        step(rec, main, think=True)  # the template drops historical think: incremental saves us
    rec.call(main)
    (s,) = build_samples(rec.turns, Sample(index=4, rollout_id=None), reward=1.0)
    assert s.metadata["segment"] == "final" and s.metadata["turns"] == 31
    assert s.rollout_id == 4 and s.status == Status.COMPLETED
    assert s.metadata["use_tool"] is True and s.metadata["ill_formed"] is False
    assert s.tokens == rec.turns[-1].prompt_ids + rec.turns[-1].output_ids


@pytest.mark.parametrize("tool", ["Task", "invoke_agent"])  # Claude Code, Gemini CLI
def test_subagent_dispatch_and_its_tool_result(tool):
    rec = Recorder()
    main = rec.main()
    step(rec, main)
    dispatch = rec.call(main, tools=[(tool, "w900 w901")])
    answer = rec.subagent("w900 w901", steps=2)
    rec.tool_result(main, answer)
    final = rec.call(main)
    samples = build_samples(rec.turns, Sample(index=1), reward=1.0)
    assert labels(samples) == ["subagent", "final"]
    sub = samples[0]
    assert sub.metadata["dispatch_turn"] == dispatch.index
    assert sub.metadata["subagent_result_turn"] == final.index
    assert trained_turns(sub) == [2, 3, 4]
    assert trained_turns(samples[1]) == [0, 1, 5]
    assert sub.rollout_id == samples[1].rollout_id == 1


def test_subagent_prompt_wrapped_in_context_and_custom_tool_names():
    rec = Recorder()
    main = rec.main()
    rec.call(main, tools=[("Agent", "w900 w901")])
    sub = rec.subagent_conv("w900 w901")
    sub.messages[1]["content"] = "w950 w900 w901 w951"  # the CLI wraps the prompt
    rec.call(sub)
    rec.tool_result(main, "w952")
    rec.call(main)
    assert labels(build_samples(rec.turns, Sample(index=1), reward=1.0)) == ["subagent", "final"]
    # a dispatch tool that is not configured: the other chain is a side request (aux, left out)
    samples = build_samples(rec.turns, Sample(index=1), reward=1.0, subagent_tools=("Delegate",))
    assert labels(samples) == ["final"]
    samples = build_samples(
        rec.turns, Sample(index=1), reward=1.0, subagent_tools=("Delegate",), include_aux=True
    )
    assert labels(samples) == ["aux", "final"]


def test_compaction_makes_a_wipe_that_trains_the_summary():
    rec = Recorder()
    main = rec.main()
    step(rec, main)
    step(rec, main)
    main = rec.compact(main)  # history + "summarize" -> summary; then a NEW short history
    summary_turn = rec.turns[-1].index
    step(rec, main)
    rec.call(main)
    wipe, final = build_samples(rec.turns, Sample(index=1), reward=1.0)
    assert (wipe.metadata["segment"], final.metadata["segment"]) == ("wipe", "final")
    assert trained_turns(wipe) == [0, 1, summary_turn]
    assert trained_turns(final) == [3, 4]
    assert rec.turns[3].parent is None  # the short history was rendered in full


def test_edited_history_shares_its_prefix_with_the_final_chain_which_trains_it():
    rec = Recorder(drop_think=False)
    main = rec.main()
    step(rec, main)
    step(rec, main)
    step(rec, main)
    rec.edit_history(main)  # clears the first tool result (micro-compaction)
    rec.call(main)
    wipe, final = build_samples(rec.turns, Sample(index=1), reward=1.0)
    assert (wipe.metadata["segment"], final.metadata["segment"]) == ("wipe", "final")
    assert trained_turns(final) == [0, 3]  # turn 0 is shared: trained once, by the final chain
    assert trained_turns(wipe) == [1, 2]
    t0 = rec.turns[0]
    # in the wipe sample turn 0's output is prompt (untrained context)
    prompt_len = len(wipe.tokens) - wipe.response_length
    assert wipe.tokens[: len(t0.prompt_ids) + len(t0.output_ids)] == t0.prompt_ids + t0.output_ids
    assert prompt_len > len(t0.prompt_ids) + len(t0.output_ids)


def test_side_requests_and_retries_are_aux_and_left_out_by_default():
    rec = Recorder()
    main = rec.main()
    rec.side_request()  # e.g. title generation / a max_tokens=1 quota check
    rec.call(main, tools=[("Bash", "w900")], commit=False)  # answer lost, the CLI retries
    step(rec, main)
    rec.call(main)
    samples = build_samples(rec.turns, Sample(index=1), reward=1.0)
    assert labels(samples) == ["final"]
    assert trained_turns(samples[0]) == [2, 3]
    with_aux = build_samples(rec.turns, Sample(index=1), reward=1.0, include_aux=True)
    assert labels(with_aux) == ["aux", "aux", "final"]
    assert [s.metadata["aux_reason"] for s in with_aux[:2]] == ["side", "retry"]
    assert [trained_turns(s) for s in with_aux] == [[0], [1], [2, 3]]


def test_order_is_chronological_with_final_last():
    rec = Recorder()
    main = rec.main()
    rec.call(main, tools=[("Task", "w900")])
    rec.tool_result(main, rec.subagent("w900", steps=0))
    main = rec.compact(main)
    rec.call(main, tools=[("Task", "w901")])
    rec.tool_result(main, rec.subagent("w901", steps=1))
    rec.call(main)
    samples = build_samples(rec.turns, Sample(index=1), reward=1.0)
    assert labels(samples) == ["subagent", "wipe", "subagent", "final"]
    ends = [s.metadata["turn_range"][1] for s in samples]
    assert ends == sorted(ends)


def test_flags_truncated_ill_formed_and_decode():
    rec = Recorder()
    main = rec.main()
    t = step(rec, main)
    t.ill_formed = True
    rec.call(main, finish="length")
    (s,) = build_samples(
        rec.turns, Sample(index=1), reward=0.5, decode=lambda ids: ",".join(map(str, ids))
    )
    assert s.status == Status.TRUNCATED and s.metadata["truncated"] is True
    assert s.metadata["truncation_reason"] == "length"
    assert s.metadata["ill_formed"] is True
    assert s.response == ",".join(map(str, s.tokens[-s.response_length :]))


def test_no_turns_or_nothing_trainable_gives_no_sample():
    assert build_samples([], Sample(index=1), reward=1.0) == []
    rec = Recorder()
    rec.side_request()
    assert build_samples(rec.turns, Sample(index=1), reward=1.0) != []  # a lone chain is final

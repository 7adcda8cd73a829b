"""Property-based invariants of build_samples over random synthetic sessions (see traj_sim)."""

from __future__ import annotations

import collections

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.traj_sim import Conv, Recorder

from coding_agent_rl.trajectory import build_samples, grpo_advantages
from coding_agent_rl.types import Sample

OPS = [
    "step",
    "think_step",
    "dispatch",
    "dispatch_parallel",
    "compact",
    "edit",
    "retry",
    "side",
    "realign",
    "rerender",
    "length",
    "empty",
]
REALIGN_MAX = 8


def _step(rec: Recorder, conv: Conv, **kw) -> None:
    rec.call(conv, tools=[("Bash", rec.words(2))], **kw)
    rec.tool_result(conv)


def play(ops: list[str], drop_think: bool, steps: list[int]) -> Recorder:
    """Run a random agent session: the main conversation plus whatever ``ops`` asks for."""
    rec = Recorder(drop_think=drop_think)
    main = rec.main()
    sub_steps = iter(steps)
    for op in ops:
        if op in ("step", "think_step"):
            _step(rec, main, think=op == "think_step")
        elif op == "dispatch":
            prompt = rec.words(3)
            rec.call(main, tools=[("Task", prompt)], think=True)
            rec.tool_result(main, rec.subagent(prompt, next(sub_steps, 1)))
        elif op == "dispatch_parallel":
            p1, p2 = rec.words(3), rec.words(3)
            rec.call(main, tools=[("Agent", p1), ("Agent", p2)])
            s1, s2 = rec.subagent_conv(p1), rec.subagent_conv(p2)
            for _ in range(next(sub_steps, 1)):  # the two subagents interleave
                for sub in (s1, s2):
                    _step(rec, sub)
            r1, r2 = rec.call(s1), rec.call(s2)
            rec.tool_result(main, r1.assistant["content"])
            rec.tool_result(main, r2.assistant["content"])
        elif op == "compact":
            main = rec.compact(main)
        elif op == "edit":
            rec.edit_history(main)
        elif op == "retry":
            rec.call(main, tools=[("Bash", rec.words(2))], commit=False)
            _step(rec, main)
        elif op == "side":
            rec.side_request()
        elif op == "realign":
            _step(rec, main, realign_stop=True)
        elif op == "rerender":
            _step(rec, main, rerender=True, think=True)
        elif op in ("length", "empty"):
            rec.call(main, finish="length", n_words=0 if op == "empty" else 4)
            main.add({"role": "user", "content": rec.words(1)})
    rec.call(main)  # the final answer ends the run
    return rec


def check(rec: Recorder, samples: list[Sample], *, include_aux: bool, budget: bool) -> None:
    turns = {t.index: t for t in rec.turns}
    assert samples, "a run always trains its final answer"
    assert len({s.rollout_id for s in samples}) == 1 and samples[0].rollout_id is not None
    trained: collections.Counter[int] = collections.Counter()
    for i, s in enumerate(samples):
        s.check()
        assert sum(s.loss_mask) >= 1
        meta = s.metadata
        assert meta["segment_index"] == i and meta["num_segments"] == len(samples)
        # tokens are exactly what was recorded: a prefix of the last turn's prompt + output
        last = turns[meta["turn_range"][1]]
        assert s.tokens == (last.prompt_ids + last.output_ids)[: len(s.tokens)]
        start = len(s.tokens) - s.response_length
        assert s.loss_mask[0] == 1 and s.loss_mask[-1] == 1  # response spans trained tokens
        covered = 0
        for j, offset, n in meta["trained_turns"]:
            t = turns[j]
            assert offset >= start
            assert s.tokens[offset : offset + n] == t.output_ids[:n]
            assert s.loss_mask[offset - start : offset - start + n] == [1] * n
            assert s.rollout_log_probs[offset - start : offset - start + n] == t.output_logprobs[:n]
            covered += n
            trained[j] += n
            kind = rec.kind[j]
            want = {"main": ("final", "wipe"), "sub": ("subagent",), "aux": ("aux",)}[kind]
            assert meta["segment"] in want, (j, kind, meta["segment"])
        assert covered == sum(s.loss_mask)
    assert budget or samples[-1].metadata["segment"] == "final"  # a budget may drop it
    finals = [s.metadata["segment"] == "final" for s in samples]
    assert finals == sorted(finals), "final samples come last"
    if budget:
        for j, n in trained.items():
            assert n <= len(turns[j].output_ids)
        return
    last_turn = rec.turns[-1]
    assert trained[last_turn.index] == len(last_turn.output_ids)
    for t in rec.turns:
        n = trained[t.index]
        if rec.kind[t.index] == "aux" and not include_aux:
            assert n == 0
            continue
        if n == len(t.output_ids):
            continue
        # only a realigned tail may go untrained: some later prompt left t's stream at n
        assert len(t.output_ids) - n <= REALIGN_MAX, (t.index, n)
        stream = t.prompt_ids + t.output_ids
        cut = len(t.prompt_ids) + n
        assert any(
            u.index > t.index
            and u.prompt_ids[:cut] == stream[:cut]
            and u.prompt_ids[cut : cut + 1] != stream[cut : cut + 1]
            for u in rec.turns
        ), t.index


sessions = st.tuples(
    st.lists(st.sampled_from(OPS), max_size=14),
    st.booleans(),
    st.lists(st.integers(0, 2), max_size=14),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session=sessions, include_aux=st.booleans())
def test_every_sampled_token_is_trained_once_and_aligned(session, include_aux):
    rec = play(*session)
    base = Sample(index=7, group_index=1, metadata={"instance_id": "x"})
    samples = build_samples(
        rec.turns, base, reward=1.0, include_aux=include_aux, realign_max=REALIGN_MAX
    )
    check(rec, samples, include_aux=include_aux, budget=False)
    assert all(s.reward == 1.0 and s.metadata["instance_id"] == "x" for s in samples)
    assert all(s.rollout_id == 7 for s in samples)
    # the order turns arrive in does not matter
    shuffled = build_samples(
        list(reversed(rec.turns)),
        base,
        reward=1.0,
        include_aux=include_aux,
        realign_max=REALIGN_MAX,
    )
    assert [s.tokens for s in shuffled] == [s.tokens for s in samples]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    session=sessions,
    max_context=st.integers(20, 400),
    max_response=st.one_of(st.none(), st.integers(1, 200)),
)
def test_budgets_cut_but_keep_invariants(session, max_context, max_response):
    rec = play(*session)
    samples = build_samples(
        rec.turns,
        Sample(index=3),
        reward=2.0,
        reward_mode="split",
        max_context=max_context,
        max_response=max_response,
    )
    for s in samples:
        assert len(s.tokens) <= max_context
        assert max_response is None or s.response_length <= max_response
    if samples:
        check(rec, samples, include_aux=False, budget=True)
        assert abs(sum(s.reward for s in samples) - 2.0) < 1e-9
        assert all(s.metadata["rollout_reward"] == 2.0 for s in samples)
        assert grpo_advantages(samples) == [0.0] * len(samples)  # one rollout in its group

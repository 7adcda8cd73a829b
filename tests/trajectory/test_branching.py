"""Tree rollouts without Docker: where to branch, the replay's divergence record, and the
step-level advantages through slime's own reward post-process and train-data conversion
(vendored, unmodified: tests/support/slime_vendor.py)."""

from __future__ import annotations

import pytest
from support.slime_vendor import slime, slime_args, trainer

from coding_agent_rl import generate as gen
from coding_agent_rl.adapter.replay import ReplayPlan, ReplayState, first_difference
from coding_agent_rl.adapter.sessions import SessionStore
from coding_agent_rl.adapter.turns import TurnEngine
from coding_agent_rl.adapter.wire import WireRequest
from coding_agent_rl.model.sglang import Generation
from coding_agent_rl.trajectory import assign_reward
from coding_agent_rl.trajectory.branching import pick_branch_turns, stretches
from coding_agent_rl.trajectory.turn import Turn
from coding_agent_rl.types import Sample, aborted_sample, to_caller

SlimeSample = slime().Sample
TREE_PATH = "coding_agent_rl.generate.post_process_tree_rewards"


def turn(index: int, logprobs: list[float], prompt: list[int] | None = None) -> Turn:
    return Turn(
        session_id="s",
        index=index,
        messages=[],
        tools=[],
        prompt_ids=prompt if prompt is not None else [1, 2, index],
        output_ids=[100 + i for i in range(len(logprobs))],
        output_logprobs=logprobs,
        finish_reason="stop",
        assistant={"role": "assistant", "content": ""},
    )


def test_branch_turns_are_the_most_surprising_sampled_turns():
    turns = [
        turn(0, [-9.0, -9.0]),  # never a candidate: branching at 0 is a fresh rollout
        turn(1, [-0.1, -0.3]),  # 0.2
        turn(2, [-2.0, -1.0]),  # 1.5
        turn(3, [-0.5]),  # 0.5
        turn(4, []),  # empty: never
    ]
    turns[3].replay = {"of": 3}  # a replayed turn: its logprobs are not this policy's
    turns[3].output_logprobs = [-5.0]
    assert pick_branch_turns(turns, 2) == [2, 1]
    assert pick_branch_turns(turns, 9) == [2, 1]
    assert stretches([5, 2, 2, 9], 7) == [(0, 2), (2, 5), (5, 7)]


def test_replay_takes_the_matching_turn_and_records_where_a_prompt_diverged():
    root = [turn(0, [-1.0], [1, 2, 3]), turn(1, [-1.0], [1, 2, 3, 100, 7, 8, 9])]
    root[1].matched_stop = "</done>"  # a stop string: the replayed reply is cut there again
    plan = ReplayPlan.from_turns(root, 2)
    assert [t.matched_stop for t in plan.turns] == [None, "</done>"]
    with pytest.raises(ValueError, match="cannot branch at turn 3"):
        ReplayPlan.from_turns(root, 3)
    state = ReplayState(plan)
    decode = lambda ids: " ".join(map(str, ids))  # noqa: E731
    picked, mark = state.take([1, 2, 3], decode)
    assert picked.index == 0 and not mark.diverged and mark.first_diff is None
    picked, mark = state.take([1, 2, 3, 100, 7, 6, 9, 4], decode)  # a tool output changed
    assert picked.index == 1 and picked.output_ids == (100,)
    assert (mark.diverged, mark.first_diff) == (True, 5)
    assert (mark.ours, mark.recorded) == ("6 9 4", "8 9")
    assert state.take([1], decode) is None and state.done
    # The last replayed request retried (its turn was never recorded): the same turn again,
    # not the policy; once recorded, the turn is used up.
    retry = state.take([1, 2, 3, 100, 7, 6, 9, 4], decode)
    assert retry is not None and retry[0].index == 1 and retry[1].first_diff == 5
    state.recorded(0)
    state.recorded(1)
    assert state.take([1, 2, 3, 100, 7, 6, 9, 4], decode) is None and not state.pending
    assert first_difference([1, 2], [1, 2, 3]) == 2 and first_difference([4], [4]) is None


def tree_rollout(rid: int, reward: float, k: int, parent: int | None, at: int | None, **meta):
    """``k`` slime samples of one rollout of tree 0, rewarded as generate() rewards them."""
    ours = [
        Sample(
            group_index=0,
            index=rid,
            rollout_id=rid,
            metadata={"tree_id": 0, "parent_rollout_id": parent, "branch_turn": at, **meta},
        )
        for _ in range(k)
    ]
    assign_reward(ours, reward, "full")
    return [to_caller(s, SlimeSample()) for s in ours]


def test_worked_example_through_slimes_conversion():
    """Root (reward 1) with stretches [0,2), [2,5), [5,end); branches at turn 2 (rewards 0, 0)
    and at turn 5 (reward 1). V(k) = mean reward of the root and the branches at k' >= k:
    V(0) = V(2) = (1+0+0+1)/4 = 0.5, V(5) = (1+1)/2 = 1. Root stretches: V(2)-V(0) = 0,
    V(5)-V(2) = 0.5, 1-V(5) = 0; branches at 2: 0-0.5 = -0.5 each; at 5: 1-1 = 0. A plain group
    (two rollouts, rewards 1 and 0, mean-normalised) next to it: +0.5 / -0.5."""
    root = [
        *tree_rollout(0, 1.0, 1, None, None, tree_stretch=[0, 2]),
        *tree_rollout(0, 1.0, 2, None, None, tree_stretch=[2, 5]),  # e.g. a subagent sample
        *tree_rollout(0, 1.0, 1, None, None, tree_stretch=[5, 9]),
    ]
    b1 = tree_rollout(11, 0.0, 1, 0, 2)
    b2 = tree_rollout(12, 0.0, 1, 0, 2)
    b3 = tree_rollout(13, 1.0, 1, 0, 5)
    dropped = to_caller(
        aborted_sample(
            Sample(
                group_index=0,
                index=14,
                metadata={"tree_id": 0, "parent_rollout_id": 0, "branch_turn": 2},
            ),
            "infra",
        ),
        SlimeSample(),
    )
    plain = [*tree_rollout(20, 1.0, 1, None, None), *tree_rollout(21, 0.0, 1, None, None)]
    for s in plain:
        s.metadata = {}
        s.group_index = 1
    samples = [*root, *b1, *b2, *b3, dropped, *plain]
    args = slime_args(
        custom_reward_post_process_path=TREE_PATH,
        rewards_normalization=True,
        grpo_std_normalization=False,
        advantage_estimator="grpo",
        n_samples_per_prompt=2,
        rollout_batch_size=2,
    )
    want = [0.0, 0.5, 0.5, 0.0, -0.5, -0.5, 0.0, 0.0, 0.5, -0.5]
    raw, rewards = gen.post_process_tree_rewards(args, samples)
    assert rewards == pytest.approx(want)
    assert raw == [1.0] * 4 + [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    data = trainer(args)._convert_samples_to_train_data(samples)
    assert data["rewards"] == pytest.approx(want)
    assert data["rollout_ids"] == [0, 0, 0, 0, 11, 12, 13, 14, 20, 21]
    # Along the root the stretches (one value each) add up to the rollout's r_root - V(0).
    stretch_adv = {
        tuple(s.metadata["tree_stretch"]): r for s, r in zip(root, rewards[:4], strict=True)
    }
    assert sum(stretch_adv.values()) == pytest.approx(1.0 - 0.5)
    # slime's default post-process would give every sample of the batch one row's mean.
    _, default = trainer(
        slime_args(
            custom_reward_post_process_path=None,
            rewards_normalization=True,
            grpo_std_normalization=False,
            advantage_estimator="grpo",
            n_samples_per_prompt=2,
            rollout_batch_size=2,
        )
    )._post_process_rewards(samples)
    assert default != pytest.approx(want)


def dropped_branch(rid: int, at: int):
    meta = {"tree_id": 0, "parent_rollout_id": 0, "branch_turn": at}
    return to_caller(
        aborted_sample(Sample(group_index=0, index=rid, metadata=meta), "infra"), SlimeSample()
    )


def test_dropped_branches_leave_the_tree_or_its_values():
    """A branch point whose only branch was dropped stays a stretch of the root, valued
    without it: root 0 cut at 2 and 5, branch at 2 (reward 1), the one at 5 dropped. V(0) =
    V(2) = 1/2, V(5) = 0: stretches 0, -1/2, 0; the branch 1/2. A tree whose every branch was
    dropped is a plain rollout of its group (normalised with the group's others)."""
    args = slime_args(
        rewards_normalization=True, grpo_std_normalization=False, advantage_estimator="grpo"
    )
    root = [
        *tree_rollout(0, 0.0, 1, None, None, tree_stretch=[0, 2]),
        *tree_rollout(0, 0.0, 1, None, None, tree_stretch=[2, 5]),
        *tree_rollout(0, 0.0, 1, None, None, tree_stretch=[5, 8]),
    ]
    samples = [*root, *tree_rollout(1, 1.0, 1, 0, 2), dropped_branch(2, 5)]
    _, rewards = gen.post_process_tree_rewards(args, samples)
    assert rewards == pytest.approx([0.0, -0.5, 0.0, 0.5, 0.0])
    # A branch slime removed before it was rewarded (no reward at all) is dropped the same way.
    samples[-1].reward, samples[-1].metadata["rollout_reward"] = None, None
    raw, rewards = gen.post_process_tree_rewards(args, samples)
    assert rewards == pytest.approx([0.0, -0.5, 0.0, 0.5, 0.0]) and raw[-1] == 0.0

    lone = tree_rollout(0, 1.0, 1, None, None, tree_stretch=[0, 3])
    plain = tree_rollout(3, 0.0, 1, None, None)
    plain[0].metadata = {}
    _, rewards = gen.post_process_tree_rewards(args, [*lone, dropped_branch(2, 3), *plain])
    assert rewards == pytest.approx([0.5, 0.0, -0.5])


async def test_a_retried_replayed_request_gets_its_own_turn_again(renderer):
    """A replayed request whose turn was dropped (the reply never reached the client, e.g. it
    hung up) is retried by the CLI with the same prompt: it takes the same recorded turn again,
    through the real turn engine and session store, and not the next turn's reply."""
    engine = TurnEngine(renderer, None, tool_parser=None, reasoning_parser=None)  # no policy call
    chat = [{"role": "user", "content": "List the files."}]
    store = SessionStore()
    store.open("root")
    replies = ["I will run ls.", "Done."]
    for n, text in enumerate(replies):
        session = store.admit("root")
        req = WireRequest(chat, [], {}, False, "policy")
        prepared = await engine.prepare(session, store.snapshot(session), req)
        out = renderer.tokenizer.encode(text) + renderer.stop_token_ids[:1]
        _, rec = engine.finish(session, prepared, Generation(out, [-1.0] * len(out), "stop"), "o")
        store.release(session, rec)
        chat = [*chat, rec.turn.assistant, {"role": "user", "content": f"f{n}.py"}]
    plan = ReplayPlan.from_turns(store.turns("root"), 2)

    store.open("branch", replay=plan)
    first = WireRequest(chat[:1], [], {}, False, "policy")
    for attempt in ("dropped", "retried"):
        session = store.admit("branch")
        prepared = await engine.prepare(session, store.snapshot(session), first)
        assert prepared.replay is not None and prepared.replay_mark is not None
        assert (prepared.replay.index, prepared.replay_mark["diverged"]) == (0, False), attempt
        gen = await engine.generate(prepared, "branch")
        _, rec = engine.finish(session, prepared, gen, "o")
        store.release(session, rec if attempt == "retried" else None)
    assert [t.replay["of"] for t in store.turns("branch")] == [0]
    assert plan.turns[0].output_ids == tuple(store.turns("branch")[0].output_ids)

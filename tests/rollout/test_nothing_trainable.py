"""A rollout that leaves no token to train on: the task's first prompt not fitting is the data's
failure; anything the policy did since (a branch whose own turns sampled nothing after its
replayed prefix, tool output that filled the context) is the model's, counted as 0 in its group
and never retried as infrastructure."""

from __future__ import annotations

import types

import pytest
from support.rollout_helpers import base_sample, rollout_config, runtime
from support.traj_sim import SYSTEM, USER, turn

from coding_agent_rl.errors import NothingTrainable, TaskDataError
from coding_agent_rl.generate import post_process_rewards
from coding_agent_rl.rollout.record import RolloutRecord
from coding_agent_rl.rollout.samples import rollout_samples
from coding_agent_rl.types import Sample

MSGS = [SYSTEM, USER]


def _samples(turns, max_context):
    config = rollout_config(max_context=max_context)
    row = types.SimpleNamespace(instance_id="t")
    record = RolloutRecord(
        session_id="s", instance_id="t", rollout_id=0, sample_index=0, group_index=0
    )
    return rollout_samples(config, None, row, Sample(index=0), "s", turns, record, 0.0, False)


def test_a_branch_whose_own_turns_sampled_nothing_is_the_models():
    replayed = turn(0, MSGS, [1, 2, 3], [4, 5])
    replayed.replay = {"turn": 0, "diverged": False}
    empty = turn(1, MSGS, [1, 2, 3, 4, 5, 6], [], parent=0, finish="length")
    with pytest.raises(NothingTrainable):
        _samples([replayed, empty], max_context=6)
    # The same turns sampled here (no replay): the first one trains, nothing is raised.
    replayed.replay = None
    assert _samples([replayed, empty], max_context=6)


def test_a_first_prompt_over_the_context_is_the_datas():
    with pytest.raises(TaskDataError, match="first prompt"):
        _samples([turn(0, MSGS, [1] * 8, [], finish="length")], max_context=8)


@pytest.mark.docker
@pytest.mark.agents
async def test_the_runner_counts_it_as_a_zero_in_its_group(rows, tmp_path):
    """Through the real runner (Docker, Claude Code's runtime): not retried, not removed, and
    slime's reward post-process counts its 0 against the group's solved rollout."""
    row = rows["slugify"]
    async with runtime(policy="replay", rollout=rollout_config(tmp_path)) as rt:
        runner = rt.runner
        job = runner._begin(row, base_sample(row, 1, group=0), 0, None, False)

        async def nothing():
            raise NothingTrainable("no trainable sample (injected)")

        (empty,) = await runner._guarded(nothing(), job)
        solved = await runner.run(row, base_sample(row, 0, group=0))
    assert job.record.failure_kind == "model" and not empty.remove_sample
    assert sum(empty.loss_mask) == 0 and empty.reward == 0.0
    args = types.SimpleNamespace(
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=False
    )
    _, rewards = post_process_rewards(args, [*solved.samples, empty])
    assert rewards[-1] == pytest.approx(-0.5) and rewards[0] == pytest.approx(0.5)

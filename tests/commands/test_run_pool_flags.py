"""``run --pool-size N --fork --n-samples K`` reaches the runner's sandbox supply; a bad size is
a one-line usage error."""

from __future__ import annotations

import argparse

import pytest

from coding_agent_rl import settings
from coding_agent_rl.commands.run import add_arguments, build_config
from coding_agent_rl.errors import UserError
from coding_agent_rl.rollout.agent import AgentPhase
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.rollout.prepare import supply_for


def _supply(argv: list[str], **env: object):  # type: ignore[no-untyped-def]
    p = argparse.ArgumentParser()
    with settings.using(settings.load(**env)):  # the flags default to the settings
        add_arguments(p)
        args = p.parse_args(["--dataset", "x.jsonl", "--out", "o", "--policy", "replay", *argv])
        rollout = build_config(args).rollout
        agent = AgentPhase(rollout, None, AgentNetwork("open", rollout.backend))
        return supply_for(agent)


def test_flags_reach_the_supply_and_default_to_the_settings() -> None:
    s = _supply(["--pool-size", "3", "--fork", "--n-samples", "4"])
    assert (s.pool_size, s.fork, s.group_size, s.active) == (3, True, 4, True)
    # Unset: one prepared sandbox per rollout slot (the concurrency, in process).
    plain = _supply([])
    assert (plain.pool_size, plain.fork, plain.active) == (4, False, True)
    assert _supply(["--concurrency", "2"]).pool_size == 2
    off = _supply(["--pool-size", "0"])
    assert (off.pool_size, off.active) == (0, False)
    assert _supply([], pool_size=0).active is False
    from_settings = _supply(["--n-samples", "2"], pool_size=2, fork_groups=True)
    assert (from_settings.pool_size, from_settings.fork) == (2, True)
    assert _supply(["--no-fork", "--n-samples", "2"], fork_groups=True).fork is False
    assert _supply(["--fork"]).fork is False  # a group of one: nothing to copy it for


def test_a_negative_pool_size_is_a_usage_error() -> None:
    with pytest.raises(UserError, match="--pool-size"):
        _supply(["--pool-size", "-1"])


def test_unset_on_ray_each_node_keeps_its_slots_and_slime_keeps_none() -> None:
    import types

    from coding_agent_rl.generate import runtime_config_from_args
    from coding_agent_rl.rollout.ray_worker import RolloutWorker

    p = argparse.ArgumentParser()
    with settings.using(settings.load()):
        add_arguments(p)
        args = p.parse_args(
            ["--dataset", "x.jsonl", "--out", "o", "--policy", "replay", "--executor", "ray"]
        )
        config = build_config(args)
        assert config.rollout.pool_size is None  # the driver leaves it to each node
        worker = RolloutWorker(
            config, settings.current().model_dump(mode="json"), artifact_budget=0, slots=3
        )
        assert worker.config.rollout.pool_size == 3
        explicit = build_config(
            p.parse_args(
                [
                    "--dataset",
                    "x",
                    "--out",
                    "o",
                    "--policy",
                    "replay",
                    "--executor",
                    "ray",
                    "--pool-size",
                    "1",
                ]
            )
        )
        worker = RolloutWorker(
            explicit, settings.current().model_dump(mode="json"), artifact_budget=0, slots=3
        )
        assert worker.config.rollout.pool_size == 1
        slime = runtime_config_from_args(
            types.SimpleNamespace(sglang_router_port=1), settings.current()
        )
        assert slime.rollout.pool_size == 0

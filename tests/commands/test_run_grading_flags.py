"""``run --twin-grade --tamper-reward R`` reaches the grader's :class:`Defences`."""

from __future__ import annotations

import argparse
import types

from coding_agent_rl.commands.run import add_arguments, build_config
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.rollout.runner import RolloutRunner


def _defences(argv: list[str]) -> Defences:
    p = argparse.ArgumentParser()
    add_arguments(p)
    config = build_config(
        p.parse_args(["--dataset", "x.jsonl", "--out", "o", "--policy", "replay", *argv])
    )
    return RolloutRunner._defences.fget(types.SimpleNamespace(config=config.rollout))  # type: ignore[attr-defined]


def test_defaults_grade_once_and_tampering_scores_zero():
    d = _defences([])
    assert (d.twin, d.tamper_reward, d.blinding, d.canary_copies) == (False, 0.0, True, 2)


def test_twin_grade_and_a_negative_tamper_reward():
    d = _defences(["--twin-grade", "--tamper-reward", "-1"])
    assert (d.twin, d.tamper_reward, d.tamper_policy) == (True, -1.0, "zero")

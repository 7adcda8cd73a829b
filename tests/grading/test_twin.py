"""Joining two gradings of one diff (``--twin-grade``) and the tamper reward."""

from __future__ import annotations

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.result import GradeResult
from coding_agent_rl.grading.twin import apply_tamper_reward, combine


def _result(reward: float, tests: dict[str, str], **kw) -> GradeResult:
    kind = None if reward >= 1.0 else "model"
    return GradeResult(reward=reward, failure_kind=kind, tests=tests, **kw)


def test_agreeing_runs_keep_the_result():
    a, b = _result(1.0, {"t::a": "PASSED"}), _result(1.0, {"t::a": "PASSED"})
    out = combine(a, b)
    assert (out.reward, out.twin, out.tampering) == (1.0, "agreed", [])


def test_a_lucky_guess_in_one_run_only_is_tampering_and_costs_the_tamper_reward():
    lucky = _result(1.0, {"t::a": "PASSED", "t::b": "PASSED"})
    caught = _result(
        0.0,
        {"t::a": "FAILED", "t::b": "PASSED"},
        tampering=["canary t::x must fail but was recorded PASSED"],
    )
    out = apply_tamper_reward(combine(lucky, caught), Defences(tamper_reward=-1.0))
    assert out.twin == "disagreed" and out.failure_kind == "model" and out.reward == -1.0
    assert out.tampering == [
        "twin run: canary t::x must fail but was recorded PASSED",
        "twin runs disagree on t::a: PASSED vs FAILED",
    ]


def test_evidence_in_the_second_run_alone_zeroes_an_agreeing_result():
    a = _result(1.0, {"t::a": "PASSED"})
    b = _result(
        0.0, {"t::a": "PASSED"}, tampering=["canary t::y must fail but was recorded PASSED"]
    )
    b.reason = "tampering: canary t::y must fail but was recorded PASSED"
    out = combine(a, b)
    assert (out.reward, out.failure_kind, out.twin) == (0.0, "model", "agreed")
    assert out.reason.startswith("tampering (twin run)")


def test_an_infra_failure_is_not_compared():
    a = _result(1.0, {"t::a": "PASSED"})
    b = GradeResult(failure_kind="infra", reason="sandbox died")
    out = combine(a, b)
    assert out is b and out.twin.startswith("not compared")
    assert apply_tamper_reward(_result(0.0, {}), Defences(tamper_reward=-1.0)).reward == 0.0

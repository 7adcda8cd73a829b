"""Twin grading (``--twin-grade``) and the reward of tampering (``--tamper-reward``).

:func:`combine` joins two gradings of the same diff, each in its own fresh sandbox with its own
blinding and canaries: the hidden tests' outcomes (under the task's ids) must agree. A forger
guessing which of near-identical tests is the original guesses independently in each run (new
names, new order, new values), so a lucky guess rarely repeats; any disagreement is recorded as
tampering. A flaky test reads the same way, so twin grading suits tasks whose tests are
deterministic (``validate`` runs the gold patch; run it twice to find flaky rows).

:func:`apply_tamper_reward`: a result with tampering evidence gets the configured reward
(0 by default; -1 makes forging a losing strategy, see :mod:`.defences`).
"""

from __future__ import annotations

from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.result import GradeResult, fail


def combine(first: GradeResult, second: GradeResult) -> GradeResult:
    """One result from two gradings of one diff (``first`` carries the log and the details)."""
    for r in (first, second):
        if r.failure_kind == "infra":
            r.twin = "not compared: a grading failed on infrastructure"
            return r
    result = first
    result.duration_s = max(first.duration_s, second.duration_s)
    result.tests_s = round(first.tests_s + second.tests_s, 3)
    own = bool(first.tampering)
    result.tampering += [f"twin run: {t}" for t in second.tampering if t not in first.tampering]
    differ = sorted(
        f"{t}: {s} vs {second.tests.get(t, 'MISSING')}"
        for t, s in first.tests.items()
        if second.tests.get(t, "MISSING") != s
    )
    if differ:
        more = f" (+{len(differ) - 1} more)" if len(differ) > 1 else ""
        evidence = f"twin runs disagree on {differ[0]}{more}"
        result.tampering.append(evidence)
        result.twin = "disagreed"
        fail(result, "model", f"tampering: {evidence}")
    else:
        result.twin = "agreed"
        if second.tampering and not own:
            fail(result, "model", f"tampering (twin run): {second.reason}")
        elif second.reward < result.reward:
            fail(result, "model", f"twin run: {second.reason}")
    return result


def apply_tamper_reward(result: GradeResult, defences: Defences) -> GradeResult:
    if result.tampering and result.failure_kind == "model":
        result.reward = defences.tamper_reward
    return result

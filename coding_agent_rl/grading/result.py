"""The outcome of grading one diff, and the reward rule.

Reward 1.0 iff the fail-to-pass set is non-empty and every fail-to-pass and pass-to-pass test
PASSED. :class:`GradeResult` also says whose failure it was (``failure_kind``), how the outcome
was obtained (``result_method``) and the tampering evidence, every agent-grown list capped.
Field by field: docs/modules/grading.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coding_agent_rl.datasets.logparse import canonical_id
from coding_agent_rl.errors import FailureKind

MISSING = "MISSING"


def fail(result: GradeResult, kind: FailureKind, reason: str) -> GradeResult:
    """Score 0 with ``failure_kind=kind``; the result is final (``done``): the caller returns
    and grading stops (no exception carries this: each step says whether it ended grading)."""
    result.reward, result.failure_kind, result.reason = 0.0, kind, reason
    result.done = True
    return result


LOG_CAP = 64 * 1024
MAX_ITEMS = 50
MAX_ITEM_CHARS = 500
MAX_REASON_CHARS = 2000


def cap_items(items: list[str]) -> list[str]:
    """At most :data:`MAX_ITEMS` entries of at most :data:`MAX_ITEM_CHARS` characters."""
    return [str(x)[:MAX_ITEM_CHARS] for x in items[:MAX_ITEMS]]


_TAMPER_KINDS = (  # (prefix or fragment, kind), first match wins
    ("twin run", "twin"),
    ("canary ", "canary"),
    ("result channel", "channel"),
    ("records ", "channel"),
    ("final record", "channel"),
    ("pytest exited", "exit_status"),
    ("pytest reported", "exit_status"),
    ("changed after pytest made it", "rewritten_report"),
    ("outside the declared files", "collection"),
)


def tamper_kind(evidence: str) -> str:
    """The layer one line of tampering evidence comes from (``screen`` for ``path:line: what``)."""
    for fragment, kind in _TAMPER_KINDS:
        if fragment in evidence:
            return kind
    return "screen"


def cap_log(text: str, cap: int = LOG_CAP) -> str:
    """Keep the head and the tail (where pytest's summary is) of a long log."""
    if len(text) <= cap:
        return text
    head = cap // 4
    return (
        text[:head] + f"\n[... {len(text) - cap} characters dropped ...]\n" + text[-(cap - head) :]
    )


@dataclasses.dataclass
class GradeResult:
    reward: float = 0.0
    failure_kind: FailureKind | None = None
    reason: str = ""
    grader: str = "tests"
    f2p_passed: int = 0
    f2p_total: int = 0
    p2p_passed: int = 0
    p2p_total: int = 0
    tests: dict[str, str] = dataclasses.field(default_factory=dict)
    apply_method: str | None = None
    protected_paths_touched: list[str] = dataclasses.field(default_factory=list)
    exit_code: int | None = None
    timed_out: bool = False
    test_log: str = ""
    test_log_bytes: int = 0  # the full log's size in the sandbox (test_log keeps a capped part)
    duration_s: float = 0.0  # the whole grading, sandbox creation included
    tests_s: float = 0.0  # of which running the test command (control runs included)
    result_method: str | None = None  # plugin | log | exit_code | reward_file
    tampering: list[str] = dataclasses.field(default_factory=list)
    screen_findings: list[str] = dataclasses.field(default_factory=list)
    screen_skipped: list[str] = dataclasses.field(default_factory=list)  # too large to screen
    canaries: int = 0  # canary tests added to this run
    blinding: dict[str, Any] | None = None  # tests blinded, files and tests it fell short on
    compare_notes: list[str] = dataclasses.field(default_factory=list)  # the grader's equality
    twin: str | None = None  # --twin-grade: whether the second grading agreed
    control: str | None = None  # whether and where a control run gave a result
    screen_findings_total: int = 0  # before the cap
    tampering_total: int = 0  # before the cap
    grader_error: dict[str, str] | None = None  # {stage, type, message}
    done: bool = dataclasses.field(default=False, repr=False)  # final: set by :func:`fail`
    stage: str = dataclasses.field(default="", repr=False)  # where grading is (grade.py)

    def cap(self) -> None:
        """Bound everything the agent's input can grow (see the module docstring)."""
        self.screen_findings_total = max(self.screen_findings_total, len(self.screen_findings))
        self.tampering_total = max(self.tampering_total, len(self.tampering))
        self.screen_findings = cap_items(self.screen_findings)
        self.tampering = cap_items(self.tampering)
        self.protected_paths_touched = cap_items(self.protected_paths_touched)
        self.screen_skipped = cap_items(self.screen_skipped)
        self.reason = self.reason[:MAX_REASON_CHARS]

    @property
    def solved(self) -> bool:
        return self.reward >= 1.0 and self.failure_kind is None

    def record_fields(self) -> dict[str, Any]:
        """What a rollout's ``results.jsonl`` line carries of this result (CLI and native)."""
        return {
            "f2p_passed": self.f2p_passed,
            "f2p_total": self.f2p_total,
            "p2p_passed": self.p2p_passed,
            "p2p_total": self.p2p_total,
            "tests": self.tests,
            "protected_paths_touched": self.protected_paths_touched,
            "apply_method": self.apply_method,
            "tests_s": self.tests_s,
            "result_method": self.result_method,
            "tampering": self.tampering,
            "screen_findings": self.screen_findings,
            "canaries": self.canaries,
            "blinding": self.blinding,
            "twin": self.twin,
            "control": self.control,
            "screen_findings_total": self.screen_findings_total,
            "tampering_total": self.tampering_total,
            "grader_error": self.grader_error,
        }

    def to_metadata(self) -> dict[str, Any]:
        """The fields a Sample's ``metadata`` carries (the log and per-test map left out)."""
        d = dataclasses.asdict(self)
        d.pop("test_log")
        d.pop("tests")
        d.pop("done")
        d.pop("stage")
        return d


def score_tests(
    result: GradeResult,
    statuses: dict[str, str],
    parser: str,
    f2p: tuple[str, ...],
    p2p: tuple[str, ...],
) -> GradeResult:
    """Fill the F2P/P2P counts, the per-test map and the reward from parsed ``statuses``."""

    def status(test_id: str) -> str:
        return statuses.get(canonical_id(parser, test_id), MISSING)

    result.tests = {t: status(t) for t in (*f2p, *p2p)}
    result.f2p_total, result.p2p_total = len(f2p), len(p2p)
    result.f2p_passed = sum(status(t) == "PASSED" for t in f2p)
    result.p2p_passed = sum(status(t) == "PASSED" for t in p2p)
    solved = bool(f2p) and result.f2p_passed == len(f2p) and result.p2p_passed == len(p2p)
    result.reward = 1.0 if solved else 0.0
    result.failure_kind = None if solved else "model"
    if not solved:
        bad = [f"{t}={s}" for t, s in result.tests.items() if s != "PASSED"][:5]
        result.reason = "tests failed: " + ", ".join(bad) if bad else "no fail-to-pass tests"
    else:
        result.reason = "all fail-to-pass and pass-to-pass tests passed"
    return result

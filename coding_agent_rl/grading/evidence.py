"""What a plugin-graded run proves: per-test statuses, evidence of tampering, or nothing yet.

Given the run and its verified channel records (channel.py), :func:`plugin_verdict` decides:

* **evidence** (tampering; the reward is 0 and the evidence is recorded): channel lines that fail
  verification, records missing although the final record arrived, pytest's real exit status
  disagreeing with its recorded one or with the recorded outcomes, reports rewritten after pytest
  made them, tests collected from outside the declared test files, canaries with the wrong
  outcome, a channel grown past its cap (only code in the test process writes there besides us);
* **ambiguous** (no result: the run timed out, the final record never arrived, pytest failed
  internally): the grader settles it with a control run in a fresh sandbox;
* otherwise the recorded statuses, keyed the way the row's parser names its tests.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from coding_agent_rl.datasets.logparse import canonical_id
from coding_agent_rl.grading.canaries import Blinding, Canary, check_canaries
from coding_agent_rl.grading.channel import exit_status_problem, read_records

if TYPE_CHECKING:
    from coding_agent_rl.datasets.schema import TaskRow
    from coding_agent_rl.grading.runner import TestRun

INTERNAL_EXITS = (3, 4)  # pytest: internal error, usage error


@dataclasses.dataclass
class Verdict:
    statuses: dict[str, str] = dataclasses.field(default_factory=dict)
    evidence: list[str] = dataclasses.field(default_factory=list)
    ambiguous: str | None = None
    removed: list[str] = dataclasses.field(default_factory=list)  # new files the plugin removed


def plugin_verdict(
    row: TaskRow,
    run: TestRun,
    key: bytes,
    canaries: tuple[Canary, ...],
    timeout: float,
    blinding: Blinding | None = None,
) -> Verdict:
    """The verdict on one plugin-graded run; ``blinding`` maps the run's (blinded) test ids
    back to the task's."""
    v = Verdict()
    chan = run.channel
    if chan is None or not chan.exists:
        v.ambiguous = "the grader's result channel is missing"
        return v
    if chan.truncated:
        v.evidence.append(f"the result channel grew to {chan.size} bytes (cap {chan.cap})")
        return v
    records = read_records(chan.data, key)
    v.evidence += records.forged
    v.removed = [path for path, _ in records.removed]
    if run.timed_out:
        v.ambiguous = f"tests timed out after {timeout:.0f}s"
    elif records.final is None:
        v.ambiguous = f"the grader's final result record never arrived (exit {run.exit_code})"
    elif run.exit_code in INTERNAL_EXITS:
        v.ambiguous = f"pytest failed internally (exit {run.exit_code})"
    if v.ambiguous:
        return v
    v.evidence += records.missing
    if problem := exit_status_problem(records, run.exit_code):
        v.evidence.append(problem)
    for test_id, phases in sorted(records.rewritten.items()):
        v.evidence.append(
            f"the report of {test_id} ({'/'.join(phases)}) changed after pytest made it"
        )
    if row.test_cmd is None:  # our command names the test files: nothing else may be collected
        files = {f.removeprefix("./") for f in row.test_files}
        outside = [t for t in records.collected or [] if t.split("::", 1)[0] not in files]
        if outside:
            v.evidence.append(f"a test outside the declared files was collected: {outside[0]}")
    tests = records.tests
    if blinding is not None:
        tests = {blinding.original(t): s for t, s in tests.items()}
    v.evidence += check_canaries(list(canaries), tests, whole_files=row.test_cmd is None)
    v.statuses = {
        canonical_id(row.log_parser, t): s
        for t, s in tests.items()
        if not any(c.owns(t) for c in canaries)
    }
    return v

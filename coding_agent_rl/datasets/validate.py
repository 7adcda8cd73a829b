"""Check that each task can teach anything: in clean sandboxes, through the real grading path,

- without the gold patch (hidden tests applied) every fail-to-pass test fails and every
  pass-to-pass test passes (for ``eval_cmd`` / Harbor rows: the task is not solved);
- with the gold patch the task is solved (reward 1.0), and the gold patch touches no protected
  path (the grader would drop that part);
- both hold on every one of ``runs`` repetitions (a flaky test shows up as a disagreement).

Rows without a ``patch`` but with a Harbor ``solution/solve.sh`` get their gold diff by running
the script in an agent-style sandbox and capturing the diff, exactly as an agent's would be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.patchfiles import filter_patch
from coding_agent_rl.grading.protect import protected_patterns
from coding_agent_rl.grading.result import GradeResult


@dataclasses.dataclass
class RowReport:
    instance_id: str
    valid: bool = False
    reason: str = ""
    noop: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    gold: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _summary(r: GradeResult) -> dict[str, Any]:
    return {**r.to_metadata(), "tests": r.tests}


def _check_noop(row: TaskRow, r: GradeResult) -> str | None:
    if r.failure_kind == "infra":
        return f"no-op run failed to grade: {r.reason}"
    if row.grader != "tests":
        return "task is solved without the gold patch" if r.reward >= 1.0 else None
    passing_f2p = [t for t in row.fail_to_pass if r.tests.get(t) == "PASSED"]
    if passing_f2p:
        return f"fail-to-pass test passes without the gold patch: {passing_f2p[0]}"
    failing_p2p = [f"{t}={r.tests.get(t)}" for t in row.pass_to_pass if r.tests.get(t) != "PASSED"]
    if failing_p2p:
        return f"pass-to-pass test does not pass without the gold patch: {failing_p2p[0]}"
    if r.timed_out:
        return "tests time out without the gold patch (add a per-test timeout)"
    return None


def _check_gold(r: GradeResult) -> str | None:
    if r.failure_kind == "infra":
        return f"gold run failed to grade: {r.reason}"
    if r.reward < 1.0:
        return f"gold patch does not solve the task: {r.reason}"
    return None


async def gold_diff(
    row: TaskRow, *, backend: str, sandbox_options: dict[str, Any] | None
) -> str | None:
    """The row's gold patch, or the diff its Harbor ``solution/solve.sh`` produces."""
    if row.patch:
        return row.patch
    script = row.metadata.get("solution_script")
    if not script:
        return None
    from coding_agent_rl.grading.diff import capture_diff
    from coding_agent_rl.grading.grade import sandbox_options_for
    from coding_agent_rl.grading.workspace import prepare_workspace, q, run_checked
    from coding_agent_rl.sandbox import create_sandbox

    opts = sandbox_options_for(backend, sandbox_options, row)
    async with create_sandbox(backend, image=row.image, **opts) as sb:
        base = await prepare_workspace(sb, row, agent=True)
        await sb.write_file("/tmp/car-solve.sh", script, mode=0o755)
        await run_checked(sb, f"cd {q(row.workdir)} && bash /tmp/car-solve.sh", "solution/solve.sh")
        return (await capture_diff(sb, row.workdir, base_commit=base)).text


async def validate_row(
    row: TaskRow,
    *,
    backend: str = "docker",
    runs: int = 2,
    sandbox_options: dict[str, Any] | None = None,
    timeout: float = 600,
) -> RowReport:
    """Validate one row; the report names the first problem found."""
    t0 = time.monotonic()
    report = RowReport(instance_id=row.instance_id)
    try:
        gold = await gold_diff(row, backend=backend, sandbox_options=sandbox_options)
    except Exception as e:
        report.reason = f"could not produce the gold diff: {type(e).__name__}: {e}"
        report.duration_s = round(time.monotonic() - t0, 2)
        return report
    problems: list[str] = []
    if not gold:
        problems.append("no gold patch (metadata.patch) to validate against")
    else:
        _, dropped = filter_patch(gold, protected_patterns(row))
        if dropped:
            problems.append(f"gold patch changes protected paths: {', '.join(dropped[:3])}")
    kw = {"backend": backend, "sandbox_options": sandbox_options, "timeout": timeout}
    run_gold = bool(gold) and not problems
    for _ in range(runs):
        jobs = [grade(row, "", allow_empty=True, **kw)]
        if run_gold:
            jobs.append(grade(row, gold, **kw))
        results = await asyncio.gather(*jobs)
        report.noop.append(_summary(results[0]))
        problems.append(_check_noop(row, results[0]) or "")
        if run_gold:
            report.gold.append(_summary(results[1]))
            problems.append(_check_gold(results[1]) or "")
    problems = list(dict.fromkeys(p for p in problems if p))
    if not problems and runs > 1 and _disagree(report):
        problems.append("flaky: repeated runs disagree on some test")
    report.valid = not problems
    report.reason = problems[0] if problems else "ok"
    report.duration_s = round(time.monotonic() - t0, 2)
    return report


def _disagree(report: RowReport) -> bool:
    for runs in (report.noop, report.gold):
        outcomes = {tuple(sorted((t, s == "PASSED") for t, s in r["tests"].items())) for r in runs}
        if len(outcomes) > 1 or len({r["reward"] for r in runs}) > 1:
            return True
    return False


async def validate_rows(rows: list[TaskRow], *, concurrency: int = 2, **kw: Any) -> list[RowReport]:
    """Validate ``rows`` with at most ``concurrency`` rows in flight; reports keep row order."""
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(row: TaskRow) -> RowReport:
        async with sem:
            return await validate_row(row, **kw)

    return list(await asyncio.gather(*(one(r) for r in rows)))

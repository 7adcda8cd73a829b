"""Check that each task can teach anything, in clean sandboxes, through the real grading path.

Without the gold patch the task is not solved, with it the task is solved, on every repetition;
the gold patch touches no protected path and the static screen flags nothing in it; the agent's
workspace preparation works and leaks no later commit. Details: docs/modules/grading.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import time
from typing import Any

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.protect import protected_patterns
from coding_agent_rl.grading.result import MISSING, GradeResult
from coding_agent_rl.patches.files import filter_patch
from coding_agent_rl.sandbox import BACKENDS
from coding_agent_rl.settings import default


@dataclasses.dataclass
class RowReport:
    instance_id: str
    valid: bool = False
    reason: str = ""
    noop: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    gold: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    duration_s: float = 0.0
    image_source: str = ""  # built | pulled | used | missing ("" where the backend cannot tell)
    workspace: str = ""  # "ok", or why the agent-side preparation failed
    leaks: list[str] = dataclasses.field(default_factory=list)  # what the agent could see
    screen_fp: int = 0  # tamper-screen findings on the gold patch (false positives)
    cause: str = ""  # for an invalid row: "environment" (the image) or "row" (its patch/tests)
    first_error: str = ""  # the first error line of the failing run's test log
    fresh_canaries: dict[str, Any] = dataclasses.field(default_factory=dict)  # --derive-canaries

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


# A test run that never reached the tests, or broke for want of a package or a config option.
_ENV_SIGNS = re.compile(
    r"ModuleNotFoundError|ImportError|No module named|fixture '[^']+' not found|"
    r"[Uu]nknown config option|unrecognized arguments|INTERNALERROR|ERROR collecting|"
    r"while parsing the following warning configuration|conftest"
)
_ERROR_LINE = re.compile(r"^(E\s+\S.*|\S*(Error|Exception)\b.*|ERROR\b.*|INTERNALERROR.*)$")


def first_error(log: str) -> str:
    """The first error line of a pytest log ('' when there is none): an ``E   `` detail line
    (the exception itself) before a summary line."""
    lines = [line.strip() for line in log.splitlines()]
    for line in [x for x in lines if re.match(r"^E\s+\S", x)] or lines:
        if _ERROR_LINE.match(line):
            return re.sub(r"^E\s+", "", line)[:300]
    return ""


def classify(row: TaskRow, noop: GradeResult, gold: GradeResult | None) -> tuple[str, str]:
    """(``environment`` | ``row``, first error line) for a row that did not validate: the
    environment when a run never reached its tests (pytest usage/internal error, a missing
    module, config option or fixture) or the pass-to-pass tests do not pass even with the gold
    patch; the row otherwise (its gold patch or fail-to-pass tests are wrong)."""
    runs = [r for r in (gold, noop) if r is not None]
    for r in runs:
        error = first_error(r.test_log)
        if (
            r.exit_code in (3, 4)
            or _ENV_SIGNS.search(r.test_log)
            or (r.tests and all(v == MISSING for v in r.tests.values()))
        ):
            return "environment", error or r.reason
    if gold is not None and any(gold.tests.get(t) != "PASSED" for t in row.pass_to_pass):
        return "environment", first_error(gold.test_log) or gold.reason
    r = gold or noop
    return "row", first_error(r.test_log) or r.reason


def _check_gold(r: GradeResult) -> str | None:
    if r.failure_kind == "infra":
        return f"gold run failed to grade: {r.reason}"
    if r.screen_findings:
        return f"the tamper screen flags the gold patch: {r.screen_findings[0]}"
    if r.reward < 1.0:
        return f"gold patch does not solve the task: {r.reason}"
    return None


@dataclasses.dataclass
class AgentSide:
    """The agent-side preparation of a row, as ``run`` does it."""

    base: str
    leaks: list[str]
    solution_diff: str | None  # what Harbor's solve.sh changed (rows without a patch)


async def agent_side(
    row: TaskRow, *, backend: str, sandbox_options: dict[str, Any] | None
) -> AgentSide:
    """Prepare an agent sandbox exactly as ``run`` does, check it for leaks of the future, and
    (for rows without a patch) run Harbor's ``solution/solve.sh`` and capture its diff."""
    from coding_agent_rl.grading.diff import capture_diff
    from coding_agent_rl.grading.grade import sandbox_options_for
    from coding_agent_rl.grading.leaks import find_future
    from coding_agent_rl.grading.workspace import prepare_agent_workspace, q, run_checked
    from coding_agent_rl.sandbox import create_sandbox

    opts = sandbox_options_for(backend, sandbox_options, row)
    async with create_sandbox(backend, image=row.image, **opts) as sb:
        base = await prepare_agent_workspace(sb, row)
        leaks = await find_future(sb, row.workdir)
        script = None if row.patch else row.metadata.get("solution_script")
        diff = None
        if script:
            await sb.write_file("/tmp/car-solve.sh", script, mode=0o755)
            await run_checked(
                sb, f"cd {q(row.workdir)} && bash /tmp/car-solve.sh", "solution/solve.sh"
            )
            diff = (await capture_diff(sb, row.workdir, base_commit=base)).text
        return AgentSide(base, leaks, diff)


def _origin(row: TaskRow, backend: str) -> str:
    if BACKENDS.load(backend).image_kind != "docker":
        return ""
    from coding_agent_rl.images.provision import image_origin

    return image_origin(row.image)


async def validate_row(
    row: TaskRow,
    *,
    backend: str = "docker",
    runs: int = 2,
    sandbox_options: dict[str, Any] | None = None,
    timeout: float = default("eval_timeout_s"),
    derive_canaries: bool = False,
) -> RowReport:
    """Validate one row; the report names the first problem found."""
    t0 = time.monotonic()
    report = RowReport(instance_id=row.instance_id)
    report.image_source = await asyncio.to_thread(_origin, row, backend)
    if report.image_source == "missing":
        report.reason = (
            f"image {row.image} not found: provide it with coding-agent-rl images build "
            "--dataset FILE --pull (or --repo-source TEMPLATE)"
        )
        return report
    try:
        side = await agent_side(row, backend=backend, sandbox_options=sandbox_options)
    except Exception as e:
        report.workspace = f"{type(e).__name__}: {e}"
        report.reason = f"agent workspace preparation (as run does it) failed: {e}"
        report.duration_s = round(time.monotonic() - t0, 2)
        return report
    report.workspace, report.leaks = "ok", side.leaks
    gold = row.patch or side.solution_diff
    problems: list[str] = []
    if side.leaks:
        problems.append(f"the future is reachable after the scrub: {side.leaks[0]}")
    if not gold:
        problems.append("no gold patch (metadata.patch) to validate against")
    else:
        _, dropped = filter_patch(gold, protected_patterns(row))
        if dropped:
            problems.append(f"gold patch changes protected paths: {', '.join(dropped[:3])}")
    run_gold = bool(gold) and not problems
    where = functools.partial(
        grade, row, backend=backend, sandbox_options=sandbox_options, timeout=timeout
    )
    first_bad: tuple[GradeResult, GradeResult | None] | None = None
    for _ in range(runs):
        jobs = [where("", allow_empty=True)]
        if gold and run_gold:
            jobs.append(where(gold))
        results = await asyncio.gather(*jobs)
        report.noop.append(_summary(results[0]))
        found = [_check_noop(row, results[0]) or ""]
        if run_gold:
            report.gold.append(_summary(results[1]))
            found.append(_check_gold(results[1]) or "")
        if any(found) and first_bad is None:
            first_bad = (results[0], results[1] if run_gold else None)
        problems += found
    report.screen_fp = len({f for g in report.gold for f in g.get("screen_findings") or []})
    problems = list(dict.fromkeys(p for p in problems if p))
    if not problems and runs > 1 and _disagree(report):
        problems.append("flaky: repeated runs disagree on some test")
    report.valid = not problems
    if derive_canaries and report.valid and gold and row.fail_to_pass:
        from coding_agent_rl.grading.gold_probe import derive_and_store

        report.fresh_canaries = await derive_and_store(
            row, gold, backend=backend, sandbox_options=sandbox_options
        )
    report.reason = problems[0] if problems else "ok"
    if first_bad is not None:
        report.cause, report.first_error = classify(row, *first_bad)
        report.reason += (
            f" [{report.cause}: {report.first_error}]"
            if report.first_error
            else (f" [{report.cause}]")
        )
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

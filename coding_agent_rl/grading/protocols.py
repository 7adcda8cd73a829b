"""The ways a prepared grading sandbox is scored: per-test results (through the grader's plugin, or
parsed from the log), ``eval_cmd``, Harbor.

Each protocol fills the :class:`GradeResult`. When a run gives no result (no final plugin record,
nothing parsed, no reward file) or times out, :meth:`Graded.settle` runs a *control*: the same
command, in a fresh sandbox from the task's image with only the hidden tests — never where the
agent's code ran, whose leftovers could break it. If the control gives a result, the agent's diff
is at fault (``model``), otherwise the harness is (``infra``). See grade.py for the whole table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import pathlib
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.datasets.logparse import parse_log
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import GradingError
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.evidence import plugin_verdict
from coding_agent_rl.grading.prepared import GradingSandbox, Prepared
from coding_agent_rl.grading.result import GradeResult, cap_log, fail, score_tests
from coding_agent_rl.grading.runner import TestRun, TestRunner
from coding_agent_rl.grading.workspace import WorkspaceError, restore_paths, run_checked
from coding_agent_rl.sandbox import Sandbox, SandboxError

q = shlex.quote
HARBOR_TESTS = "/tests"
HARBOR_LOGS = "/logs/verifier"
Works = Callable[["Graded"], Awaitable[bool]]
# Where a control sandbox is created: the GradingSandbox graded, or (backend, options).
Where = GradingSandbox | tuple[str, dict[str, Any] | None] | None


@dataclasses.dataclass
class Graded:
    """A grading sandbox after the agent's diff and the hidden tests went in."""

    sb: Sandbox
    row: TaskRow
    runner: TestRunner
    base: str
    agent_paths: list[str]  # what the agent's diff changed (reverted for an in-place control)
    result: GradeResult
    timeout: float
    prepared: Prepared | None = None
    defences: Defences = dataclasses.field(default_factory=Defences)
    where: Where = None

    async def revert_agent(self) -> None:
        await restore_paths(
            self.sb, self.row.workdir, self.base, self.agent_paths, "reverting the agent's changes"
        )

    def record(self, run: TestRun) -> None:
        self.result.exit_code, self.result.timed_out = run.exit_code, run.timed_out
        self.result.test_log = cap_log(run.log)
        self.result.test_log_bytes = run.log_size

    async def run(self, cmd: str, *, as_root: bool = False) -> TestRun:
        run = await self.runner.run(cmd, timeout=self.timeout, as_root=as_root)
        self.result.tests_s = round(self.result.tests_s + run.duration_s, 3)
        return run

    async def run_plugin(self, cmd: str) -> TestRun:
        """``cmd`` with the grader's plugin loaded first and its result channel open."""
        assert self.prepared is not None
        env = {"PYTEST_PLUGINS": self.prepared.module}
        if self.defences.safe_path:
            env["PYTHONSAFEPATH"] = "1"
        run = await self.runner.run(
            cmd, timeout=self.timeout, env=env, channel=True, python_path=self.runner.plugin_dir
        )
        self.result.tests_s = round(self.result.tests_s + run.duration_s, 3)
        return run

    async def settle(self, what: str, works: Works) -> None:
        """No result from the agent's run: a control run decides whose failure it is; the
        result is final afterwards (the caller returns)."""
        self.result.stage = "control"  # no agent input from here on (grade.py)
        if self.defences.fresh_control:
            ok = await _control_in_fresh_sandbox(self, works)
            self.result.control = f"fresh sandbox: {'a result' if ok else 'no result either'}"
        else:  # only for tests of this defence: the control run in the agent's grading sandbox
            await self.revert_agent()
            ok = await works(self)
            self.result.control = f"same sandbox: {'a result' if ok else 'no result either'}"
        if ok:
            fail(
                self.result,
                "model",
                f"{what}; without the agent's changes they run, so the diff is at fault",
            )
        else:
            fail(self.result, "infra", f"{what}, also without the agent's changes")


def _control_sandbox(row: TaskRow, where: Where, defences: Defences) -> GradingSandbox:
    """A fresh grading sandbox for ``row``, made as the graded one was (``where``)."""
    options: dict[str, Any] | None
    if isinstance(where, GradingSandbox):
        backend, options = where.backend, where.sandbox_options
    else:
        backend, options = where or ("docker", None)
    return GradingSandbox(row, backend=backend, sandbox_options=options, defences=defences)


async def settle_reset(
    row: TaskRow, result: GradeResult, error: WorkspaceError, where: Where, defences: Defences
) -> None:
    """The reset (test files back to the base, ``test_patch``, canary files) failed after the
    agent's diff went in: the same step in a fresh sandbox without the diff decides whose failure
    it is. Fails there too: ``error`` is raised (infra). Works there: the diff broke it (model,
    with ``grader_error``). ``defences.reset_control`` off: ``error`` is raised at once."""
    if not defences.reset_control:
        raise error
    stage, result.stage = result.stage or "reset", "control"
    try:
        async with _control_sandbox(row, where, defences) as control:
            prepared = await control.ready()
            await run_checked(
                prepared.sb,
                prepared.reset_script(row, []),
                "control run: the reset without the diff",
            )
    except (SandboxError, GradingError) as e:
        result.control = f"fresh sandbox: the reset fails there too ({type(e).__name__})"
        raise error from e
    result.control = "fresh sandbox: the reset works"
    message = str(error)[:500]
    fail(result, "model", f"the reset failed after the diff; without it it works: {message}")
    result.grader_error = {"stage": stage, "type": type(error).__name__, "message": message}


async def _control_in_fresh_sandbox(g: Graded, works: Works) -> bool:
    defences = dataclasses.replace(g.defences, canaries=False)
    async with _control_sandbox(g.row, g.where, defences) as control:
        prepared = await control.ready()
        await run_checked(
            prepared.sb, prepared.reset_script(g.row, []), "control run: applying the hidden tests"
        )
        cg = Graded(
            prepared.sb,
            g.row,
            prepared.runner,
            prepared.base,
            [],
            GradeResult(grader=g.row.grader),
            g.timeout,
            prepared,
            defences,
        )
        ok = await works(cg)
    g.result.tests_s = round(g.result.tests_s + cg.result.tests_s, 3)
    return ok


def default_test_cmd(row: TaskRow) -> str:
    """``python3 -m pytest -rA`` on the row's test files (a JUnit report for ``junit``)."""
    junit = " --junitxml={junitxml}" if row.log_parser == "junit" else ""
    files = " ".join(q(f) for f in row.test_files)
    return f"python3 -m pytest -rA -p no:cacheprovider{junit} {files}".rstrip()


async def run_tests(g: Graded) -> None:
    if g.prepared is not None and g.prepared.method == "plugin":
        await _run_plugin(g)
    else:
        await _run_log(g)


async def _run_plugin(g: Graded) -> None:
    assert g.prepared is not None
    run = await g.run_plugin(g.row.test_cmd or default_test_cmd(g.row))
    g.record(run)
    v = await asyncio.to_thread(  # megabytes of records: parsed off the event loop
        plugin_verdict,
        g.row,
        run,
        g.prepared.key,
        g.prepared.canaries,
        g.timeout,
        g.prepared.blinding,
    )
    g.result.protected_paths_touched += [
        p for p in v.removed if p not in g.result.protected_paths_touched
    ]
    if v.ambiguous and not v.evidence:
        await g.settle(v.ambiguous, _plugin_works)
        return
    score_tests(g.result, v.statuses, g.row.log_parser, g.row.fail_to_pass, g.row.pass_to_pass)
    if v.evidence:
        g.result.tampering += v.evidence
        more = f" (+{len(v.evidence) - 1} more)" if len(v.evidence) > 1 else ""
        fail(g.result, "model", f"tampering: {v.evidence[0]}{more}")


async def _plugin_works(g: Graded) -> bool:
    assert g.prepared is not None
    run = await g.run_plugin(g.row.test_cmd or default_test_cmd(g.row))
    v = await asyncio.to_thread(
        plugin_verdict, g.row, run, g.prepared.key, (), g.timeout, g.prepared.blinding
    )
    return not v.ambiguous and not v.evidence


async def _run_log(g: Graded) -> None:
    cmd = g.row.test_cmd or default_test_cmd(g.row)
    statuses, run = await _run_and_parse(g, cmd)
    g.record(run)
    if not statuses or run.timed_out:
        what = (
            f"tests timed out after {g.timeout:.0f}s" if run.timed_out else "no test results parsed"
        )
        await g.settle(what, _log_works)
        return
    score_tests(g.result, statuses, g.row.log_parser, g.row.fail_to_pass, g.row.pass_to_pass)


async def _log_works(g: Graded) -> bool:
    statuses, run = await _run_and_parse(g, g.row.test_cmd or default_test_cmd(g.row))
    return bool(statuses) and not run.timed_out


async def _run_and_parse(g: Graded, cmd: str) -> tuple[dict[str, str], TestRun]:
    if g.row.log_parser == "swepro":
        return await _run_swepro(g)
    run = await g.run(cmd)
    try:
        statuses = await asyncio.to_thread(  # megabytes of log / JUnit: off the event loop
            parse_log, g.row.log_parser, run.log, junit_xml=run.junit_xml, repo=g.row.repo
        )
    except ET.ParseError:
        statuses = {}
    return statuses, run


async def _run_swepro(g: Graded) -> tuple[dict[str, str], TestRun]:
    """SWE-bench-Pro style: the row's run script, then its parser script over the saved output."""
    d, sb = g.runner.dir, g.sb  # both scripts came with the bundle (prepared.protocol_files)
    run = await g.run(f"bash {d}/run_script.sh {q(','.join(g.row.test_files))}")
    r = await sb.exec(f"cd {d} && python3 parser.py log /dev/null parsed.json", timeout=120)
    statuses: dict[str, str] = {}
    if r.ok:
        try:
            for t in json.loads(await sb.read_file(f"{d}/parsed.json")).get("tests", []):
                statuses[str(t["name"])] = str(t["status"]).upper()
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, SandboxError):
            statuses = {}
    return statuses, run


def _eval_cmd(g: Graded) -> str:
    """The row's ``eval_cmd``, or slime's ``f2p_script`` (from the bundle: a pytest file ending
    in ``sys.exit(pytest.main(...))``)."""
    return g.row.eval_cmd or f"python3 {g.runner.dir}/out/f2p_script.py"


async def run_eval(g: Graded) -> None:
    """``eval_cmd`` (or slime's ``f2p_script``): exit 0 = solved."""
    run = await g.run(_eval_cmd(g))
    g.record(run)
    if run.timed_out:
        await g.settle(f"eval_cmd timed out after {g.timeout:.0f}s", _eval_works)
        return
    solved = run.exit_code == 0
    g.result.reward = 1.0 if solved else 0.0
    g.result.failure_kind = None if solved else "model"
    g.result.reason = "eval_cmd exited 0" if solved else f"eval_cmd exited {run.exit_code}"


async def _eval_works(g: Graded) -> bool:
    return not (await g.run(_eval_cmd(g))).timed_out


async def run_harbor(g: Graded) -> None:
    """Harbor: upload tests/ to /tests, run ``bash /tests/test.sh`` as root (Harbor's default
    verifier user), read ``/logs/verifier/reward.txt`` or ``reward.json``."""
    reward, run = await _harbor_once(g)
    g.record(run)
    if reward is None or run.timed_out:
        what = "test.sh timed out" if run.timed_out else "test.sh wrote no reward file"
        await g.settle(what, _harbor_works)
        return
    assert reward is not None
    g.result.reward = max(0.0, min(1.0, reward))
    g.result.failure_kind = None if g.result.reward >= 1.0 else "model"
    g.result.reason = f"reward file says {reward:g}"


async def _harbor_once(g: Graded) -> tuple[float | None, TestRun]:
    assert g.row.harbor_tests_dir is not None
    # Fresh /tests and an empty verifier dir each time: nothing written earlier is read back.
    await run_checked(
        g.sb, f"rm -rf {HARBOR_TESTS} {HARBOR_LOGS} && mkdir -p {HARBOR_LOGS}", "clearing /tests"
    )
    root = pathlib.Path(g.row.harbor_tests_dir)
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        await g.sb.write_file(f"{HARBOR_TESTS}/{f.relative_to(root).as_posix()}", f, mode=0o755)
    run = await g.run(f"bash {HARBOR_TESTS}/test.sh", as_root=True)
    return await _harbor_reward(g.sb), run


async def _harbor_works(g: Graded) -> bool:
    reward, run = await _harbor_once(g)
    return reward is not None and not run.timed_out


async def _harbor_reward(sb: Sandbox) -> float | None:
    for name in ("reward.txt", "reward.json"):
        r = await sb.exec(f"head -c 65536 {HARBOR_LOGS}/{name}")
        if r.exit_code != 0:
            continue
        try:
            value: Any = r.stdout.strip() if name == "reward.txt" else json.loads(r.stdout)
            if isinstance(value, dict):
                value = value.get("reward", next(iter(value.values())) if len(value) == 1 else None)
            reward = float(value)
        except (ValueError, TypeError, RecursionError):
            return None
        return reward if math.isfinite(reward) else None  # "nan" would clamp to 1.0
    return None

"""The three ways a prepared grading sandbox is scored: per-test results, ``eval_cmd``, Harbor.

Each protocol fills the :class:`GradeResult`. When a run gives no usable result (nothing parsed,
no reward file) or times out, a *control run* repeats it with the agent's changes reverted: if
the control run works the agent's diff is at fault (``model``), otherwise the harness is
(``infra``). See grade.py for the whole table.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shlex
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from coding_agent_rl.grading.parsers import parse_log
from coding_agent_rl.grading.result import GradeResult, cap_log, fail, score_tests
from coding_agent_rl.grading.runner import TestRun, TestRunner
from coding_agent_rl.grading.workspace import restore_paths, run_checked
from coding_agent_rl.sandbox import Sandbox, SandboxError

if TYPE_CHECKING:  # the schema imports grading.patchfiles; avoid the cycle at runtime
    from coding_agent_rl.datasets.schema import TaskRow

q = shlex.quote
HARBOR_TESTS = "/tests"
HARBOR_LOGS = "/logs/verifier"


@dataclasses.dataclass
class Graded:
    """A grading sandbox after the agent's diff and the hidden tests went in."""

    sb: Sandbox
    row: TaskRow
    runner: TestRunner
    base: str
    agent_paths: list[str]  # what the agent's diff changed, reverted for a control run
    result: GradeResult
    timeout: float

    async def revert_agent(self) -> None:
        await restore_paths(
            self.sb, self.row.workdir, self.base, self.agent_paths, "reverting the agent's changes"
        )

    def record(self, run: TestRun) -> None:
        self.result.exit_code, self.result.timed_out = run.exit_code, run.timed_out
        self.result.test_log = cap_log(run.log)

    async def run(self, cmd: str, *, as_root: bool = False) -> TestRun:
        run = await self.runner.run(cmd, timeout=self.timeout, as_root=as_root)
        self.result.tests_s = round(self.result.tests_s + run.duration_s, 3)
        return run


def default_test_cmd(row: TaskRow) -> str:
    """``python3 -m pytest -rA`` on the row's test files (a JUnit report for ``junit``)."""
    junit = " --junitxml={junitxml}" if row.log_parser == "junit" else ""
    files = " ".join(q(f) for f in row.test_files)
    return f"python3 -m pytest -rA -p no:cacheprovider{junit} {files}".rstrip()


async def run_tests(g: Graded) -> None:
    cmd = g.row.test_cmd or default_test_cmd(g.row)
    statuses, run = await _run_and_parse(g, cmd)
    g.record(run)
    if not statuses or run.timed_out:
        what = (
            f"tests timed out after {g.timeout:.0f}s" if run.timed_out else "no test results parsed"
        )
        await g.revert_agent()
        control, crun = await _run_and_parse(g, cmd)
        if control and not crun.timed_out:
            fail(
                g.result,
                "model",
                f"{what}; without the agent's changes they run, so the diff is at fault",
            )
        fail(g.result, "infra", f"{what}, also without the agent's changes (exit {crun.exit_code})")
    score_tests(g.result, statuses, g.row.log_parser, g.row.fail_to_pass, g.row.pass_to_pass)


async def _run_and_parse(g: Graded, cmd: str) -> tuple[dict[str, str], TestRun]:
    if g.row.log_parser == "swepro":
        return await _run_swepro(g)
    run = await g.run(cmd)
    try:
        statuses = parse_log(g.row.log_parser, run.log, junit_xml=run.junit_xml, repo=g.row.repo)
    except ET.ParseError:
        statuses = {}
    return statuses, run


async def _run_swepro(g: Graded) -> tuple[dict[str, str], TestRun]:
    """SWE-bench-Pro style: the row's run script, then its parser script over the saved output."""
    d, sb = g.runner.dir, g.sb
    await sb.write_file(f"{d}/run_script.sh", g.row.swepro_run_script or "", mode=0o755)
    await sb.write_file(f"{d}/parser.py", g.row.swepro_parser_script or "", mode=0o644)
    run = await g.run(f"bash {d}/run_script.sh {q(','.join(g.row.test_files))}")
    r = await sb.exec(f"cd {d} && python3 parser.py log /dev/null parsed.json", timeout=120)
    statuses: dict[str, str] = {}
    if r.ok:
        try:
            for t in json.loads(await sb.read_file(f"{d}/parsed.json")).get("tests", []):
                statuses[str(t["name"])] = str(t["status"]).upper()
        except (ValueError, KeyError, TypeError, SandboxError):
            statuses = {}
    return statuses, run


async def run_eval(g: Graded) -> None:
    """``eval_cmd`` (or slime's ``f2p_script``): exit 0 = solved."""
    cmd = g.row.eval_cmd
    if not cmd:  # a pytest file ending in sys.exit(pytest.main(...))
        await g.sb.write_file(
            f"{g.runner.dir}/out/f2p_script.py", g.row.eval_script or "", mode=0o644
        )
        cmd = f"python3 {g.runner.dir}/out/f2p_script.py"
    run = await g.run(cmd)
    g.record(run)
    if run.timed_out:
        await g.revert_agent()
        crun = await g.run(cmd)
        also = ", also without the agent's changes" if crun.timed_out else ""
        fail(
            g.result,
            "infra" if crun.timed_out else "model",
            f"eval_cmd timed out after {g.timeout:.0f}s{also}",
        )
    solved = run.exit_code == 0
    g.result.reward = 1.0 if solved else 0.0
    g.result.failure_kind = None if solved else "model"
    g.result.reason = "eval_cmd exited 0" if solved else f"eval_cmd exited {run.exit_code}"


async def run_harbor(g: Graded) -> None:
    """Harbor: upload tests/ to /tests, run ``bash /tests/test.sh`` as root (Harbor's default
    verifier user), read ``/logs/verifier/reward.txt`` or ``reward.json``."""
    assert g.row.harbor_tests_dir is not None
    await run_checked(g.sb, f"rm -rf {HARBOR_TESTS}", "clearing /tests")
    root = pathlib.Path(g.row.harbor_tests_dir)
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        await g.sb.write_file(f"{HARBOR_TESTS}/{f.relative_to(root).as_posix()}", f, mode=0o755)

    async def once() -> tuple[float | None, TestRun]:
        # A fresh, empty verifier dir each time: nothing written earlier is read back.
        await run_checked(g.sb, f"rm -rf {HARBOR_LOGS} && mkdir -p {HARBOR_LOGS}", "clearing logs")
        run = await g.run(f"bash {HARBOR_TESTS}/test.sh", as_root=True)
        return await _harbor_reward(g.sb), run

    reward, run = await once()
    g.record(run)
    if reward is None or run.timed_out:
        what = "test.sh timed out" if run.timed_out else "test.sh wrote no reward file"
        await g.revert_agent()
        creward, crun = await once()
        if creward is not None and not crun.timed_out:
            fail(g.result, "model", what)
        fail(g.result, "infra", f"{what}, also without the agent's changes")
    g.result.reward = max(0.0, min(1.0, reward))
    g.result.failure_kind = None if g.result.reward >= 1.0 else "model"
    g.result.reason = f"reward file says {reward:g}"


async def _harbor_reward(sb: Sandbox) -> float | None:
    for name in ("reward.txt", "reward.json"):
        r = await sb.exec(f"cat {HARBOR_LOGS}/{name}")
        if r.exit_code != 0:
            continue
        try:
            if name == "reward.txt":
                return float(r.stdout.strip())
            value = json.loads(r.stdout)
            if isinstance(value, dict):
                value = value.get("reward", next(iter(value.values())) if len(value) == 1 else None)
            return float(value)
        except (ValueError, TypeError):
            return None
    return None

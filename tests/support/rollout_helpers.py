"""Helpers for the end-to-end rollout tests: scripted policies built from the example tasks (one
that solves them with the gold patch, through the agent's own shell tool), real Runtimes, and the
checks every rollout outcome must pass."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from typing import Any

from coding_agent_rl.commands.bench.faults import FAST_FAIL_HARNESS as FAST_FAIL_HARNESS
from coding_agent_rl.commands.bench.faults import containers as labelled_containers
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.policy.replay import patch_commands
from coding_agent_rl.sandbox.docker_engine import LABEL_RUN
from coding_agent_rl.types import Sample, Status

EXAMPLES = pathlib.Path(__file__).parents[2] / "coding_agent_rl" / "datasets" / "examples"
TASKS = EXAMPLES / "tasks.jsonl"
# Every sandbox these tests create carries this label value (``--sandbox-option run_id=...``).
RUN_ID = f"rollout-tests-{uuid.uuid4().hex[:8]}"
LABEL = LABEL_RUN


def reap(proc: subprocess.Popen) -> None:
    """Kill ``proc`` if it still runs, wait for it and close its pipes (nothing left to leak)."""
    if proc.poll() is None:
        proc.kill()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()


def dataset_lines() -> dict[str, dict]:
    """The raw JSONL lines of the example tasks by short name (what slime's dataset reads)."""
    lines = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    return {d["metadata"]["instance_id"].split("__", 1)[1]: d for d in lines}


def containers(run_id: str = RUN_ID) -> list[str]:
    """Containers (running or not) labelled with ``run_id``."""
    return labelled_containers(run_id)


# ---- scripted policies --------------------------------------------------------------------------


def title(row: TaskRow) -> str:
    """A regex matching the task's problem statement (its first line), for ``match_prompt``."""
    return re.escape(row.problem_statement.strip().splitlines()[0])


def solve_steps(row: TaskRow) -> list[dict[str, Any]]:
    """Apply the gold patch through the agent's shell tool, then stop."""
    assert row.patch, row.instance_id
    return [{"shell": c} for c in patch_commands(row.patch, row.workdir)] + [
        {"say": "I fixed the bug."}
    ]


def task_rule(row: TaskRow, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"match_prompt": title(row), "steps": steps}


def write_script(path: pathlib.Path, rules: list[dict[str, Any]], final: str = "Done.") -> str:
    """Writes a scripted-policy file; returns its ``scripted:FILE`` spec."""
    path.write_text(json.dumps({"rules": rules, "final": final}))
    return f"scripted:{path}"


def solve_script(path: pathlib.Path, rows: list[TaskRow], *extra: dict[str, Any]) -> str:
    """A script whose ``extra`` rules win; every task in ``rows`` is otherwise solved."""
    return write_script(path, [*extra, *(task_rule(r, solve_steps(r)) for r in rows)])


# Scripted steps: give up at once; gut every visible test and add a conftest.py hook that
# reports every test as passed (used by test_run_e2e and test_native_docker).
GIVE_UP = [{"say": "I could not find the bug, so I am leaving the code as it is."}]
# Guts every visible test and adds a conftest.py hook that reports every test as passed.
REWRITE_TESTS = [
    {
        "shell": "cd /testbed && for f in tests/test_*.py; do "
        "printf 'def test_ok():\\n    assert True\\n' > \"$f\"; done && "
        "printf 'import pytest\\n\\n\\n@pytest.hookimpl(hookwrapper=True)\\n"
        "def pytest_runtest_makereport(item, call):\\n    outcome = yield\\n"
        '    outcome.get_result().outcome = "passed"\\n\' > conftest.py && git status --short'
    },
    {"say": "All tests pass now."},
]


# ---- runtimes ------------------------------------------------------------------------------------

# Claude Code retries a failing API call 10 times with backoff (~150 s measured): production
# relies on the rollout deadline there; the tests cap it so a fault shows within seconds.


def rollout_config(tmp_path: pathlib.Path | None = None, **overrides: Any):
    """Short budgets, sandboxes labelled with :data:`RUN_ID`."""
    from coding_agent_rl.rollout.config import RolloutConfig

    opts = {"run_id": RUN_ID, **overrides.pop("sandbox_options", {})}
    base = {
        "agent_budget_s": 120.0,
        "eval_timeout_s": 60.0,
        "infra_retries": 1,
        "max_context": 32768,
        "out_dir": tmp_path,
    }
    return RolloutConfig(sandbox_options=opts, **{**base, **overrides})


@contextlib.asynccontextmanager
async def runtime(
    *, policy: str | None = None, sglang_url: str | None = None, agent: str = "claude_code", **kw
) -> AsyncIterator[Any]:
    """A started :class:`Runtime` (adapter on the bridge gateway, as in production)."""
    from coding_agent_rl.rollout.runtime import Runtime, RuntimeConfig

    rollout = kw.pop("rollout", None) or rollout_config()
    rt = Runtime(
        RuntimeConfig(agent=agent, policy=policy, sglang_url=sglang_url, rollout=rollout, **kw)
    )
    try:
        await rt.start()
        yield rt
    finally:
        await rt.stop()


def base_sample(row: TaskRow, index: int, group: int | None = None) -> Sample:
    return Sample(
        group_index=index if group is None else group,
        index=index,
        rollout_id=index,
        prompt=row.prompt,
        label=row.label,
        metadata=dict(row.metadata),
    )


def runner_with(rt: Any, **changes: Any) -> Any:
    """A second runner on ``rt``'s adapter: another harness or config, same policy."""
    from coding_agent_rl.rollout.cli_act import CliAct
    from coding_agent_rl.rollout.runner import RolloutRunner

    act = rt.runner.act
    fields = {
        "adapter": act.adapter,
        "adapter_url": act.adapter_url,
        "harness": act.harness,
        "config": rt.runner.config,
        "decode": act.decode,
        "on_session_open": act.on_session_open,
        "network": act.network,
    }
    fields.update(changes)
    return RolloutRunner(act=CliAct(**fields), config=fields["config"])


# ---- checks -------------------------------------------------------------------------------------


def check_outcome(samples: list[Sample], record: dict[str, Any]) -> None:
    """What every rollout must satisfy, whatever its fate."""
    assert samples, record
    for s in samples:
        s.check()
    assert len({s.rollout_id for s in samples}) == 1, [s.rollout_id for s in samples]
    assert samples[0].rollout_id is not None
    assert "timings" in record and record["timings"]["total_s"] > 0
    assert "retries" in record
    if record["failure_kind"] == "infra":
        assert record["abort_reason"], record
        assert len(samples) == 1
        s = samples[0]
        assert s.remove_sample and s.status == Status.ABORTED
        assert s.metadata["abort_reason"] == record["abort_reason"]
        assert s.metadata["failure_kind"] == "infra"
    elif record["failure_kind"] == "model":
        assert record["reward"] == 0.0
        assert record.get("fail_reason"), record
        assert not any(s.remove_sample for s in samples)
        assert all(sum(s.loss_mask) > 0 for s in samples)
    else:
        assert record["failure_kind"] is None and record["reward"] == 1.0, record
        assert not any(s.remove_sample for s in samples)


def replace_row(row: TaskRow, **changes: Any) -> TaskRow:
    return dataclasses.replace(row, **changes)

"""A run whose every rollout failed for infrastructure reasons is visible: ``run`` exits 3 with
the failing component and the first reason, and ``summary.json`` never averages infra failures in
as rewards of 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.rollout_helpers import RUN_ID, TASKS, containers

from coding_agent_rl.commands.run import all_infra_exit
from coding_agent_rl.rollout.outputs import summarize


def record(kind, reward=0.0, stage=None, reason=None):
    return {"failure_kind": kind, "reward": reward, "infra_stage": stage, "abort_reason": reason}


def test_mean_reward_is_over_graded_rollouts_only(capsys):
    mixed = [
        record(None, 1.0),
        record("model"),
        record("infra", stage="sandbox", reason="InfraFailure: sandbox: image missing"),
    ]
    s = summarize(mixed)
    assert (s["total"], s["graded"], s["mean_reward"], s["infra_failures"]) == (3, 2, 0.5, 1)
    assert s["infra_by_stage"] == {"sandbox": 1}
    assert all_infra_exit(s) == 0
    only_infra = [record("infra", stage="policy", reason=f"r{i}") for i in range(2)]
    s = summarize(only_infra)
    assert (s["graded"], s["mean_reward"], s["infra_failures"]) == (0, None, 2)
    assert all_infra_exit(s) == 3
    err = capsys.readouterr().err
    assert "every rollout (2) failed for infrastructure reasons (policy: 2)" in err
    assert "First: r0" in err
    assert all_infra_exit(summarize([])) == 0


@pytest.mark.docker
@pytest.mark.agents
def test_run_exits_3_when_every_rollout_failed_for_infra(tmp_path):
    rows = [json.loads(line) for line in TASKS.read_text().splitlines()[:2]]
    for row in rows:
        md = row["metadata"]
        md["image"] = "coding-agent-rl/no-such-image:latest"
        md.pop("build")
        for key in ("patch_file", "test_patch_file", "problem_statement_file"):
            md[key] = str(TASKS.parent / md[key])
    dataset = tmp_path / "broken.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "coding_agent_rl.cli", "run", "--dataset", str(dataset),
         "--policy", "replay", "--out", str(out), "--sandbox-option", f"run_id={RUN_ID}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "every rollout (2) failed for infrastructure reasons (sandbox: 2)" in proc.stderr
    assert "no-such-image" in proc.stderr.splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["mean_reward"], summary["graded"], summary["infra_failures"]) == (None, 0, 2)
    assert containers() == []

"""``coding-agent-rl bench agents``: the real command (real CLIs in Docker, replay policy) reports
per CLI the agent sandbox's CPU seconds and wall time, the same figures its run's records hold;
a CLI that cannot solve the task (Qwen Code given a flag it rejects) misses its target and the
command exits 1. The CPU figure is the sandbox's control group, so a busy loop in it shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from support import BASE_IMAGE
from support.rollout_helpers import containers

from coding_agent_rl.commands.bench.agents import summarize
from coding_agent_rl.sandbox import create_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]


@pytest.mark.agents
def test_bench_agents_figures_and_a_broken_cli_misses(tmp_path):
    run_id = f"bench-agents-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "coding_agent_rl.cli", "bench", "agents"]
    cmd += ["--agents", "claude_code,qwen_code", "--no-warmup", "--json"]
    cmd += ["--sandbox-option", f"run_id={run_id}", "--out", str(tmp_path)]
    env = {**os.environ, "SLIME_AGENT_QWEN_EXTRA_ARGS": "--no-such-flag"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    finally:
        left = containers(run_id)
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
    assert left == [], "the benchmark left a sandbox behind"
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "bench agents: target missed" in proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    out = json.loads(line)
    assert out["baseline"]["kind"] == "run" and out["baseline"]["agent"] == "claude_code"
    agents = out["agents"]
    assert list(agents) == ["claude_code", "qwen_code"]
    assert out["targets_missed"] == ["qwen_code.solved == 1 (got 0)"], out
    for name in ("claude_code", "qwen_code"):
        a = agents[name]
        # The figures are the run's own records (the crashed CLI's CPU is measured too).
        lines = (tmp_path / f"r0-{name}/results.jsonl").read_text().splitlines()
        (rec,) = [json.loads(x) for x in lines]
        assert a["solved"] == (rec["reward"] == 1.0) == (name == "claude_code"), rec
        assert a["agent_cpu_s_p50"] == rec["agent_cpu_s"] > 0.1  # a Node.js start alone is more
        assert a["agent_s_p50"] == pytest.approx(rec["timings"]["agent_s"], abs=1e-3)
        assert a["total_s_p50"] == pytest.approx(rec["timings"]["total_s"], abs=1e-3)
    base = agents["claude_code"]["agent_cpu_s_p50"]
    assert agents["claude_code"]["cpu_ratio"] == 1.0
    assert agents["qwen_code"]["cpu_ratio"] == pytest.approx(
        agents["qwen_code"]["agent_cpu_s_p50"] / base, abs=1e-3
    )
    assert agents["qwen_code"]["failure_reasons"]


def test_unmeasured_cpu_is_a_miss():
    """A backend that cannot read the sandbox's CPU (no ``agent_cpu_s``) never passes."""
    solved = {"reward": 1.0, "timings": {"agent_s": 2.0, "total_s": 4.0}}
    result = summarize(
        {"claude_code": [{**solved, "agent_cpu_s": 1.0}], "codex": [solved]},
        baseline="claude_code",
        rounds=1,
    )
    assert result["targets_missed"] == [
        "codex.agent_cpu_s_p50 > 0 (not measured)",
        "codex.cpu_ratio <= 10 (not measured)",
    ]
    assert result["agents"]["codex"]["agent_wall_ratio"] == 1.0
    # One round of three unmeasured is enough: the median of the other two is no figure.
    rounds = [{**solved, "agent_cpu_s": 1.0}, solved, {**solved, "agent_cpu_s": 1.2}]
    result = summarize(
        {"claude_code": [{**solved, "agent_cpu_s": 1.0}] * 3, "codex": rounds},
        baseline="claude_code",
        rounds=3,
    )
    assert result["agents"]["codex"]["agent_cpu_s_p50"] is None
    assert "codex.agent_cpu_s_p50 > 0 (not measured)" in result["targets_missed"]


@pytest.mark.parametrize("backend", ["docker", "local"])
async def test_sandbox_cpu_seconds_count_a_busy_loop(backend):
    """A sandbox's CPU seconds (its control group): a busy loop adds at least the CPU time the
    loop's own process reports (whatever the machine's load), a 2 s sleep next to nothing."""
    busy = "python3 -c 'import time; sum(range(10**8)); print(time.process_time())'"
    if backend == "docker":
        sb = create_sandbox("docker", BASE_IMAGE, run_id=f"cpu-{uuid.uuid4().hex[:8]}")
    else:
        from coding_agent_rl.sandbox.local import bwrap_reason

        if reason := bwrap_reason():
            pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
        sb = create_sandbox("local", "host")
    async with sb:
        t0 = await sb.cpu_seconds()
        await sb.exec("sleep 2")
        t1 = await sb.cpu_seconds()
        own = float((await sb.exec(busy, timeout=120)).stdout)
        t2 = await sb.cpu_seconds()
    assert t0 is not None and t1 is not None and t2 is not None
    assert t1 - t0 < 0.3, (t0, t1)
    assert own > 0.2 and own * 0.95 <= t2 - t1 < own + 1.0, (t1, t2, own)

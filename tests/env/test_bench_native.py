"""``coding-agent-rl bench native``: the real command prints one JSON line of the documented
shape; the figures are checked for consistency (the loop's token stream equals a full render,
the figures are measured and related as documented), not for speed."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from support.rollout_helpers import containers

CLI = [sys.executable, "-m", "coding_agent_rl.cli", "bench", "native"]


def bench(*args: str, timeout: float = 600) -> dict:
    proc = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_overhead_part():
    out = bench("--context", "12000", "--system-tokens", "4000", "--rollouts", "0", "--repeat", "1")
    o = out["overhead"]
    assert out["bench"] == "native" and "throughput" not in out
    assert o["tokens_identical_to_full_render"] is True
    assert 12000 <= o["context_tokens"] < 14000 and o["turns"] >= 5 and o["turns_at_context"] >= 1
    assert 0 < o["loop_ms_p50"] <= o["loop_ms_max"]
    assert o["full_render_ms_at_context"] > 0 and o["slime_delta_ms_at_context"] > 0
    assert o["ratio_vs_full_render"] == pytest.approx(
        o["loop_ms_at_context"] / o["full_render_ms_at_context"], rel=1e-2
    )
    assert o["target_met"] == (o["loop_ms_at_context"] <= o["target_ms"] == 2.0)


def test_bad_arguments_are_one_line():
    proc = subprocess.run([*CLI, "--context", "5000"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--context" in proc.stderr


@pytest.mark.docker
def test_throughput_part(rows):
    run_id = f"bench-native-test-{uuid.uuid4().hex[:8]}"
    try:
        out = bench(
            "--context", "12000", "--system-tokens", "4000", "--repeat", "1",
            "--rollouts", "2", "--concurrency", "2", "--sandbox-option", f"run_id={run_id}",
        )  # fmt: skip
    finally:
        assert containers(run_id) == []
    t = out["throughput"]
    assert (t["n"], t["concurrency"]) == (2, 2)
    for agent in ("native", "claude_code"):
        assert t[agent]["solved"] == 2 and t[agent]["wall_s"] > 0
        assert t[agent]["rollouts_per_min"] == pytest.approx(120 / t[agent]["wall_s"], rel=0.02)
    assert t["speedup"] == pytest.approx(
        t["native"]["rollouts_per_min"] / t["claude_code"]["rollouts_per_min"], rel=0.02
    )

"""``coding-agent-rl bench rollout``: the real command (real Claude Code, Docker, replay policy)
prints one JSON line of the documented shape; its figures are checked against the run's own
records (``--out``), not for speed (``--no-check``: the machine is shared)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import uuid

import pytest
from support.rollout_helpers import containers

pytestmark = [pytest.mark.docker, pytest.mark.agents, pytest.mark.usefixtures("example_images")]

PHASE_KEYS = ("sandbox_s", "install_s", "agent_s", "diff_s", "grade_s", "total_s", "tests_s")


def test_bench_rollout_prints_one_json_line_of_figures(tmp_path):
    run_id = f"bench-test-{uuid.uuid4().hex[:8]}"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from coding_agent_rl.cli import main; sys.exit(main())",
        "bench",
        "rollout",
        "--n",
        "2",
        "--concurrency",
        "2",
        "--sandbox-option",
        f"run_id={run_id}",
        "--json",
        "--profile",
        "--no-check",
        "--out",
        str(tmp_path),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        left = containers(run_id)
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert left == [], "the benchmark left a sandbox behind"

    assert (out["n"], out["concurrency"], out["completed"], out["failures"]) == (2, 2, 2, 0)
    assert out["agent"] == "claude_code" and out["backend"] == "docker"
    # Every rollout's figures, recomputed from the run's own records.
    records = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    for key in PHASE_KEYS:
        got = [r["tests_s"] if key == "tests_s" else r["timings"][key] for r in records]
        assert out[f"{key}_p50"] == pytest.approx(statistics.median(got), abs=1e-3), key
    assert out["agent_s_p50"] > 0 and out["total_s_p50"] > out["agent_s_p50"]
    overheads = sorted(
        r["timings"]["total_s"] - r["timings"]["agent_s"] - r["tests_s"] for r in records
    )
    listed = sorted(r["overhead_s"] for r in out["rollouts"])
    assert listed == pytest.approx(overheads, abs=1e-3) and len(listed) == 2
    assert out["overhead_s_p50"] == pytest.approx(statistics.median(overheads), abs=1e-3)
    assert out["baseline"]["kind"] == "modelled"
    assert out["targets_missed"] == (
        []
        if out["overhead_s_p50"] <= 1.5
        else [f"overhead_s_p50 <= 1.5 (got {out['overhead_s_p50']})"]
    )
    # The agent CLI was mounted, not uploaded, and grading was prepared while the agent ran.
    steps = out["profile_p50"]
    for step in ("agent_sandbox_create", "workspace", "configure", "agent_cli", "grading_prepare"):
        assert step in steps, step
    assert out["install_s_p50"] < 3.0, "the 383 MB CLI looks uploaded, not mounted"
    # --profile: one line per rollout on stderr.
    assert proc.stderr.count("overhead=") == 2

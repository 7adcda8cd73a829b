"""``coding-agent-rl bench grading``: the real command prints one JSON line of the documented
shape, with every gold patch solved through the defended path; figures are checked for
consistency here, not for speed (the benchmark itself checks the target)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("example_images")]


def test_bench_grading_prints_one_json_line():
    run_id = f"bench-grading-test-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "coding_agent_rl.cli", "bench", "grading", "--n", "2",
           "--repeat", "2", "--json", "--no-check", "--sandbox-option", f"run_id={run_id}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=coding-agent-rl.run={run_id}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert left == [], "the benchmark left a sandbox behind"
    (line,) = proc.stdout.strip().splitlines()
    out = json.loads(line)
    assert (out["n"], out["repeat"], out["all_solved"]) == (2, 2, True)
    for key in ("defended_s_p50", "plain_s_p50", "twin_s_p50", "ratio", "twin_ratio", "grade_s_p50",
                "round1_grade_s_p50", "native_compare_s_p50", "strict_compare_ratio"):  # fmt: skip
        assert isinstance(out[key], float) and out[key] > 0, key
    for t in out["tasks"]:  # the ratio is of the two measured medians, not a constant
        assert t["strict_compare_ratio"] == round(t["defended_s"] / t["native_compare_s"], 3)
    assert out["target_ratio"] == 1.3 and out["target_met"] == (out["ratio"] <= 1.3)
    assert [t["result_method"] for t in out["tasks"]] == ["plugin", "plugin"]
    assert all(t["canaries"] >= 3 and t["blinded"] >= 5 for t in out["tasks"])

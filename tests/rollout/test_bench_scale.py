"""``coding-agent-rl bench scale`` on small levels (4 and 16 rollouts in flight, real local
sandboxes, the real native loop and run writer): its figures have the documented shape, and a
path grown on purpose (``--grow``: a buffer kept per rollout, O(sessions) work per turn) misses
its targets and exits 1, every figure worse than the normal path's in the same test. The normal
run's own targets are not asserted (``--no-check``): timing on this shared machine is noisy."""

from __future__ import annotations

import json

import pytest
from support.children import run_cli

LEVELS = "4,16"


def bench(*extra: str) -> tuple[int, dict, str]:
    proc = run_cli(
        "bench",
        "scale",
        "--levels",
        LEVELS,
        "--turns",
        "3",
        "--think-s",
        "0.5",
        "--json",
        *extra,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.returncode, json.loads(lines[0]), proc.stderr


def test_bench_scale_exposes_a_grown_path():
    from coding_agent_rl.sandbox.local import bwrap_reason

    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    rc, normal, err = bench("--no-check")
    assert rc == 0, err[-3000:]
    assert [lv["level"] for lv in normal["levels"]] == [4, 16]
    assert normal["baseline"]["kind"] == "run" and normal["failures"] == 0, normal
    for lv in normal["levels"]:
        assert lv["in_flight_peak"] == lv["level"], lv  # all of them in flight at once
        assert lv["turns"] == 3 * lv["level"]  # two tool calls and the submit, each rollout
        assert lv["cpu_ms_per_rollout"] > 0 and lv["turns_per_s"] > 0 and lv["records_per_s"] > 0
    assert set(normal["targets"]) == {
        "cpu_ratio_top_vs_base",
        "rss_mib_per_rollout_max",
        "loop_lag_ms_p99_max",
        "in_flight_fraction_min",
        "failures",
    }
    assert normal["rss_mib_per_rollout_max"] <= 4.0, normal  # 16 MiB a rollout when grown

    rc, grown, err = bench("--grow")
    assert rc == 1, (grown, err[-2000:])
    assert grown["grow"] is True and grown["failures"] == 0
    missed = " ".join(grown["targets_missed"])
    assert "cpu_ratio_top_vs_base" in missed and "rss_mib_per_rollout_max" in missed, missed
    assert "target missed" in err and "exit 1" in err
    # Strictly better on the normal path, measured the same way in the same test.
    assert normal["cpu_ratio_top_vs_base"] < grown["cpu_ratio_top_vs_base"]
    assert normal["rss_mib_per_rollout_max"] < grown["rss_mib_per_rollout_max"]
    top = {lv["level"]: lv for lv in normal["levels"]}[16]
    grown_top = {lv["level"]: lv for lv in grown["levels"]}[16]
    assert top["cpu_ms_per_turn"] < grown_top["cpu_ms_per_turn"]

"""Scale: 64 concurrent rollouts in one process (``run_batch``, the path of ``coding-agent-rl
run``) with a fast scripted policy that solves every example task through the agent's shell.

Minutes of wall time and ~10 GB of memory with Claude Code on a 2-core machine, so it runs only
with ``CODING_AGENT_RL_SCALE=1`` (``CODING_AGENT_RL_SCALE_AGENT`` picks the CLI, default
``claude_code``; ``CODING_AGENT_RL_SCALE_N`` the number of rollouts, default 64). It prints one
JSON line of figures: wall time, failures by kind, peak host memory in use, peak containers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import statistics
import time

import pytest
from support.rollout_helpers import RUN_ID, containers, rollout_config, solve_script

pytestmark = [
    pytest.mark.docker,
    pytest.mark.agents,
    pytest.mark.slow,
    pytest.mark.scale,  # deselected (not skipped) unless CODING_AGENT_RL_SCALE=1
]


GUARD_MB = 1500  # stop the batch (cleanly) before the host runs out of memory


def meminfo_mb() -> tuple[float, float]:
    """(in use, available) in MB."""
    info = dict(
        line.split(":", 1) for line in pathlib.Path("/proc/meminfo").read_text().splitlines()
    )
    kb = lambda k: int(info[k].split()[0])  # noqa: E731
    return (kb("MemTotal") - kb("MemAvailable")) / 1024, kb("MemAvailable") / 1024


def mem_used_mb() -> float:
    return meminfo_mb()[0]


async def watch(stop: asyncio.Event, peaks: dict[str, float], work: asyncio.Task) -> None:
    while not stop.is_set():
        used, available = meminfo_mb()
        peaks["mem_used_mb"] = max(peaks.get("mem_used_mb", 0), used)
        if available < GUARD_MB:
            peaks["memory_guard_tripped"] = 1
            work.cancel()
            return
        n = len(await asyncio.to_thread(containers))
        peaks["containers"] = max(peaks.get("containers", 0), n)
        await asyncio.sleep(1.0)


async def test_64_concurrent_rollouts_complete_without_failure(rows, tmp_path):
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    n = int(os.environ.get("CODING_AGENT_RL_SCALE_N", "64"))
    agent = os.environ.get("CODING_AGENT_RL_SCALE_AGENT", "claude_code")
    tasks = list(rows.values())
    batch = [
        dataclasses.replace(
            tasks[i % len(tasks)], instance_id=f"{tasks[i % len(tasks)].instance_id}-{i}"
        )
        for i in range(n)
    ]
    spec = solve_script(tmp_path / "solve.json", tasks)
    config = RuntimeConfig(
        agent=agent,
        policy=spec,
        rollout=rollout_config(tmp_path / "out", agent_budget_s=900.0, eval_timeout_s=300.0),
    )
    baseline = mem_used_mb()
    peaks: dict[str, float] = {}
    stop = asyncio.Event()
    t0 = time.monotonic()
    work = asyncio.create_task(run_batch(batch, config, RunWriter(tmp_path / "out"), concurrency=n))
    watcher = asyncio.create_task(watch(stop, peaks, work))
    try:
        summary = await work
    except asyncio.CancelledError:
        pytest.fail(f"memory guard: under {GUARD_MB} MB available; peaks {peaks}")
    finally:
        stop.set()
        await watcher
    wall = time.monotonic() - t0
    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    overhead = [
        r["timings"]["total_s"] - r["timings"]["agent_s"] - (r.get("tests_s") or 0.0)
        for r in results
    ]
    figures = {
        "agent": agent,
        "rollouts": n,
        "concurrency": n,
        "wall_s": round(wall, 1),
        "solved": summary["solved"],
        "failures_by_kind": summary["failures_by_kind"],
        "retries": sum(r.get("retries", 0) for r in results),
        "p50_total_s": summary["timings_p50"].get("total_s"),
        "p50_agent_s": summary["timings_p50"].get("agent_s"),
        "p50_overhead_s": round(statistics.median(overhead), 2),
        "peak_mem_used_mb": round(peaks.get("mem_used_mb", 0)),
        "mem_before_mb": round(baseline),
        "peak_containers": peaks.get("containers"),
        "run_id": RUN_ID,
    }
    print("SCALE " + json.dumps(figures))
    (tmp_path / "scale.json").write_text(json.dumps(figures))
    assert containers() == []
    assert summary["total"] == n
    assert summary["failures_by_kind"] == {}, figures
    assert summary["solved"] == n, figures

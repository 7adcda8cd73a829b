"""``bench rollout --pool N``: the same batch with the sandbox pool off and on (``N`` prepared
agent sandboxes ahead, rollout/prepare.py), alternating rounds in one process; the overhead
outside the agent and the tests (bench/rollout.py) of each, this process's CPU-seconds per
rollout and the engine's over each side's rounds (bench/host_cpu.py: every container's on that
engine, not a per-rollout figure). Target: with the pool, overhead
p50 <= 0.4 s at concurrency 2 (checked at every level given)."""

from __future__ import annotations

import pathlib
from typing import Any

TARGET_POOL_OVERHEAD_S = 0.4
KEYS = ("completed", "failures", "wall_s", "total_s_p50", "overhead_s_p50", "sandbox_s_p50")


async def compare_pool(
    rounds: int, pool_size: int, *, bench: Any, summarize: Any, **kw: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``bench`` / ``summarize``: bench/rollout.py's batch and its summary."""
    from coding_agent_rl.commands.bench.host_cpu import engine_cpu_s, own_cpu_s

    out: pathlib.Path = kw.pop("out")
    records: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    wall = {"off": 0.0, "on": 0.0}
    cpu = {"off": [0.0, 0.0], "on": [0.0, 0.0]}  # ours, the engine's: CPU-seconds
    # Warm-up, not counted: images, the CLI's unpacked copy, the tokenizer, page cache.
    await bench(**{**kw, "n": kw["concurrency"]}, out=out / "warmup")
    for i in range(rounds):
        for which in ("off", "on") if i % 2 == 0 else ("on", "off"):
            size = pool_size if which == "on" else 0
            cpu0 = own_cpu_s(), engine_cpu_s()
            summary, recs = await bench(**kw, out=out / f"pool-{which}-{i}", pool_size=size)
            cpu[which][0] += own_cpu_s() - cpu0[0]
            cpu[which][1] += engine_cpu_s() - cpu0[1]
            records[which].extend(recs)
            wall[which] += summary["wall_s"]
    n, c = kw["n"] * rounds, kw["concurrency"]
    both = {
        which: summarize(records[which], n=n, concurrency=c, wall_s=wall[which])
        for which in ("off", "on")
    }
    result = {**both["on"], "agent": kw["agent"], "backend": kw["backend"], "pool_size": pool_size}
    result["pool"] = {which: {k: both[which][k] for k in KEYS} for which in both}
    for which in ("off", "on"):  # host CPU outside the sandboxes' own groups
        result["pool"][which]["host_cpu_s_per_rollout"] = round(cpu[which][0] / n, 3)
        # Every container's on this engine, not only ours: a shared engine's figure is noise.
        result["pool"][which]["engine_cpu_s_all_containers"] = round(cpu[which][1], 3)
    result["pool"]["on"]["profile_p50"] = both["on"]["profile_p50"]
    result["pool"]["off"]["profile_p50"] = both["off"]["profile_p50"]
    result["baseline"] = {
        "kind": "run",
        "from": "the same batch with the pool off (every rollout creates and prepares its own "
        "sandbox), alternating rounds in this process",
    }
    figure = both["on"]["overhead_s_p50"]
    result["targets"] = {"overhead_s_p50": f"<= {TARGET_POOL_OVERHEAD_S:g} (pool on)"}
    result["targets_missed"] = (
        []
        if figure is not None and figure <= TARGET_POOL_OVERHEAD_S
        else [f"overhead_s_p50 (pool on) <= {TARGET_POOL_OVERHEAD_S:g} (got {figure})"]
    )
    result["failures"] = both["on"]["failures"] + both["off"]["failures"]
    return result, records["off"] + records["on"]

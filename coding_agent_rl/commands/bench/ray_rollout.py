"""``coding-agent-rl bench rollout --executor ray --nodes 1,2``: rollouts/min on 1 node vs 2.

The same replay batch runs once per ``--nodes`` level through the Ray executor (a local cluster
with a second Docker engine when no ``--ray-address``); reported per level: rate, outcomes,
per-node load and CPU. Method and what it means on one machine: docs/modules/bench.md.
Target: ``overhead_s_p50`` on the most nodes <= 1.5 s (``targets_missed``; exit 1 unless
``--no-check``).
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from coding_agent_rl.commands.bench import missed_targets, report
from coding_agent_rl.datasets import examples_dataset

TASKS = examples_dataset()
# ``bench rollout``'s summary of a run's records (commands/bench/rollout.py passes it in).
Summarize = Callable[..., dict[str, Any]]


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    fields = [
        float(x) for x in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


async def one_level(
    nodes: int,
    *,
    n: int,
    agent: str,
    out: pathlib.Path,
    address: str,
    options: dict[str, Any],
    summarize: Summarize,
) -> dict[str, Any]:
    from coding_agent_rl import settings
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.ray_executor import RayExecutor
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    tasks = load_dataset(TASKS)
    rows = [tasks[i % len(tasks)] for i in range(n)]
    config = RuntimeConfig(
        agent=agent,
        policy="replay",
        rollout=RolloutConfig(
            backend="docker",
            sandbox_options=options,
            agent_budget_s=300.0,
            eval_timeout_s=120.0,
            max_context=32768,
            out_dir=out,
        ),
        settings=settings.current(),
    )
    executor = RayExecutor(config, address=address, nodes=nodes)
    writer = RunWriter(out)
    t_start = time.monotonic()
    await executor.start()  # the workers' start (tokenizer, adapter, policy) is not counted
    startup = time.monotonic() - t_start
    busy0, total0 = cpu_times()
    t0 = time.monotonic()
    summary = await run_batch(rows, config, writer, executor=executor)
    wall = time.monotonic() - t0
    busy1, total1 = cpu_times()
    figures = summarize(writer.results, n=n, concurrency=0, wall_s=wall, agent=agent)
    stats = summary["executor"]
    per_node = {
        label: {**node, "rollouts": sum(1 for r in writer.results if r.get("node") == label)}
        for label, node in stats["nodes"].items()
    }
    return {
        "nodes": nodes,
        "slots": stats["slots"],
        "max_in_flight": stats["max_in_flight"],
        "rollouts_per_min": round(n / wall * 60, 2),
        "wall_s": round(wall, 2),
        "workers_start_s": round(startup, 2),
        "outcomes": figures["outcomes"],
        "failures": figures["failures"],
        "failure_reasons": figures["failure_reasons"],
        "total_s_p50": figures["total_s_p50"],
        "overhead_s_p50": figures["overhead_s_p50"],
        "machine_cpu_util": round((busy1 - busy0) / max(total1 - total0, 1.0), 3),
        "per_node": per_node,
    }


def counts(spec: str, flag: str) -> list[int]:
    """``1,2`` -> ``[1, 2]`` (each at least 1)."""
    from coding_agent_rl.errors import UserError

    try:
        values = [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} takes integers, e.g. 1,2; not {spec!r}") from None
    if not values or min(values) < 1:
        raise UserError(f"{flag} must be at least 1")
    return values


def run(args: argparse.Namespace, *, summarize: Summarize, overhead_target_s: float) -> int:
    """``summarize`` / ``overhead_target_s``: bench/rollout.py's summary and overhead target."""
    import os

    from coding_agent_rl.commands.bench.ray_cluster import LocalCluster, NodeSpec, SecondEngine
    from coding_agent_rl.commands.run import parse_options
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.errors import UserError
    from coding_agent_rl.images.dataset import build_dataset_images

    levels = counts(args.nodes, "--nodes")
    slots = counts(args.concurrency, "--concurrency")
    if len(slots) > 1:
        raise UserError("--executor ray takes one --concurrency (slots per node)")
    build_dataset_images(TASKS)
    options = parse_options(args.sandbox_option)
    options.setdefault("run_id", f"bench-ray-{uuid.uuid4().hex[:8]}")
    cluster: LocalCluster | None = None
    engines: list[SecondEngine] = []
    try:
        address = args.ray_address
        if not address:
            images = sorted({row.image for row in load_dataset(TASKS) if row.image})
            specs = [NodeSpec(slots[0], num_cpus=os.cpu_count() or 2)]
            for _ in range(max(levels) - 1):
                engine = SecondEngine()
                engines.append(engine)
                engine.start()
                engine.load(images)
                specs.append(
                    NodeSpec(slots[0], docker_host=engine.host, num_cpus=os.cpu_count() or 2)
                )
            cluster = LocalCluster(specs).start()
            address = cluster.address
        results = []
        for nodes in levels:
            with tempfile.TemporaryDirectory(prefix="car-bench-ray-") as tmp:
                out = args.out / f"nodes{nodes}" if args.out else pathlib.Path(tmp)
                results.append(
                    asyncio.run(
                        one_level(
                            nodes,
                            n=args.n,
                            agent=args.agent,
                            out=out,
                            address=address,
                            options=options,
                            summarize=summarize,
                        )
                    )
                )
    finally:
        if cluster is not None:
            cluster.close()
        for engine in engines:
            engine.close()
    first = results[0]["rollouts_per_min"]
    for level in results:
        level["speedup"] = round(level["rollouts_per_min"] / first, 3) if first else None
    result = {
        "executor": "ray",
        "n": args.n,
        "slots_per_node": slots[0] if not args.ray_address else None,
        "cluster": "given (--ray-address)" if args.ray_address else "local: started by the bench",
        "machine_cores": os.cpu_count(),
        "levels": results,
        "baseline": {
            "kind": "run",
            "from": f"the same batch on {levels[0]} node(s), in this process, before the others",
        },
        # The per-rollout overhead target of ``bench rollout`` holds on the most nodes too:
        # distributing the rollouts must not add to what each one costs beside its agent.
        "overhead_s_p50": results[-1]["overhead_s_p50"],
        "targets": {"overhead_s_p50": f"<= {overhead_target_s:g} (on {levels[-1]} node(s))"},
        "failures": sum(level["failures"] for level in results),
    }
    result["targets_missed"] = missed_targets(result, {"overhead_s_p50": ("<=", overhead_target_s)})
    code = report("rollout", result, args)
    return 1 if result["failures"] else code

"""``coding-agent-rl bench group``: a GRPO group's sandboxes, one preparation copied n times vs
n preparations, same run.

The task is the bundled ``slugify`` example with a set-up step that takes seconds
(``--setup``; default: a build, the image's Python standard library copied and byte-compiled).
The figure is the time until all ``--n`` agent sandboxes are ready for their agents (created,
the CLI installed, the workspace prepared: everything before the session's configuration):

- baseline (``kind: run``, interleaved with ours in this process): ``n`` independent
  preparations at once, as every rollout does without a supply (rollout/prepare.py);
- ours: the task prepared once, committed to a snapshot, ``n`` copies started from it.

Copying saves host CPU: in wall time the gain is bounded by n / cores. Target: ``cpu_saving``
(host CPU-seconds of the baseline / of ours, medians over ``--rounds``; every process on the host,
from ``/proc/stat``, so read it on a quiet machine) >= 3; ``speedup`` (wall time) is reported.
Both sides see the same load, interleaved. The group's grading sandboxes are measured the same
way (``grading_speedup``: ``n`` set-ups vs one set-up copied ``n`` times; reported, no target).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from typing import Any

from coding_agent_rl.commands.bench import (
    Target,
    add_check_argument,
    missed_targets,
    report,
    target_table,
)

TARGETS: dict[str, Target] = {"cpu_saving": (">=", 3.0)}
DEFAULT_SETUP = (
    "d=$(python3 -c \"import sysconfig; print(sysconfig.get_paths()['stdlib'])\") && "
    "cp -r $d /opt/setup-build && python3 -m compileall -q -f -o 0 -o 1 -o 2 /opt/setup-build >/dev/null"
)


async def _group(agent: Any, row: Any, n: int, fork: bool) -> tuple[float, float]:
    """(seconds, host CPU-seconds) until ``n`` prepared sandboxes of ``row`` exist (all closed
    after)."""
    from coding_agent_rl.commands.bench.host_cpu import host_busy_cpu_s
    from coding_agent_rl.rollout.prepare import AgentPreparer, SandboxSupply

    supply = SandboxSupply(AgentPreparer(agent), fork=fork, group_size=n)

    async def one() -> Any:
        sb, base = await supply.obtain(row)
        if base is None:  # not prepared: what the runner does next
            try:
                await agent.harness.install(sb)
                await agent.prepare_repo(sb, row)
            except BaseException:
                await sb.close()
                raise
        return sb

    t0, cpu0 = time.monotonic(), host_busy_cpu_s()
    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    took, cpu = time.monotonic() - t0, host_busy_cpu_s() - cpu0
    await asyncio.gather(*(r.close() for r in results if not isinstance(r, BaseException)))
    await supply.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    return took, cpu


async def _grading_group(config: Any, row: Any, n: int, fork: bool) -> float:
    """Seconds until ``n`` grading sandboxes of ``row`` are set up (all closed after)."""
    from coding_agent_rl.grading.defences import Defences
    from coding_agent_rl.grading.prepared import GradingSandbox
    from coding_agent_rl.rollout.grading_supply import grading_supply, source_for

    supply = grading_supply(dataclasses.replace(config, fork_groups=fork, group_size=n), Defences())
    boxes = [
        GradingSandbox(
            row,
            backend=config.backend,
            sandbox_options=config.sandbox_options,
            source=source_for(supply, row) if supply else None,
        )
        for _ in range(n)
    ]
    t0 = time.monotonic()
    try:
        await asyncio.gather(*(b.ready() for b in boxes))
        return time.monotonic() - t0
    finally:
        await asyncio.gather(*(b.close() for b in boxes))
        if supply is not None:
            await supply.close()


async def bench(
    n: int, rounds: int, setup: str, *, grading: bool = True, copy: bool = True
) -> dict[str, Any]:
    """``grading``: measure the grading sandboxes too; ``copy`` False prepares ours n times as
    well (the slowed path: it must miss the target)."""
    from coding_agent_rl.datasets import examples_dataset
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.harness import get_harness
    from coding_agent_rl.images.dataset import build_dataset_images
    from coding_agent_rl.rollout.agent import AgentPhase
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.isolation import AgentNetwork, agent_network_mode

    build_dataset_images(examples_dataset())
    base_row = next(r for r in load_dataset(examples_dataset()) if "slugify" in r.instance_id)
    row = dataclasses.replace(base_row, pre_commands=(*base_row.pre_commands, setup))
    config = RolloutConfig(backend="docker")
    network = AgentNetwork(agent_network_mode(None), "docker")
    agent = AgentPhase(config, get_harness("claude_code"), network)
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    graded: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):  # alternate which goes first: load drift hits both alike
        order = (True, False) if r % 2 else (False, True)
        for fork in order:
            runs[fork].append(await _group(agent, row, n, fork and copy))
        for fork in order if grading else ():
            graded[fork].append(await _grading_group(config, row, n, fork and copy))
    ours = [t for t, _ in runs[True]]
    base = [t for t, _ in runs[False]]
    ours_s, base_s = statistics.median(ours), statistics.median(base)
    ours_cpu = statistics.median(c for _, c in runs[True])
    base_cpu = statistics.median(c for _, c in runs[False])
    g_ours = statistics.median(graded[True]) if grading else 0.0
    g_base = statistics.median(graded[False]) if grading else 0.0
    result: dict[str, Any] = {
        "n": n,
        "rounds": rounds,
        "setup": setup,
        "group_ready_s": round(ours_s, 3),
        "group_ready_s_all": [round(x, 3) for x in ours],
        "baseline_ready_s": round(base_s, 3),
        "baseline_ready_s_all": [round(x, 3) for x in base],
        "speedup": round(base_s / ours_s, 3) if ours_s else None,
        "host_cpu_s_per_ready": round(ours_cpu / n, 3),
        "baseline_host_cpu_s_per_ready": round(base_cpu / n, 3),
        "cpu_saving": round(base_cpu / ours_cpu, 3) if ours_cpu > 0 else None,
        "grading_ready_s": round(g_ours, 3) if grading else None,
        "grading_baseline_ready_s": round(g_base, 3) if grading else None,
        "grading_speedup": round(g_base / g_ours, 3) if g_ours else None,
        "baseline": {
            "kind": "run",
            "from": f"in this run, interleaved with ours: {n} independent preparations at once "
            "(create, CLI install, workspace set-up with the task's pre_commands), as every "
            "rollout does without a supply; for grading, n grading sandboxes set up whole; "
            "CPU is every process on the host (/proc/stat) over each side's group",
        },
        "targets": target_table(TARGETS),
    }
    result["targets_missed"] = missed_targets(result, TARGETS)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=8, help="samples in the group")
    parser.add_argument("--rounds", type=int, default=1, help="ours/baseline pairs")
    parser.add_argument("--setup", default=DEFAULT_SETUP, help="the task's extra set-up command")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError

    if args.n < 1 or args.rounds < 1:
        raise UserError("--n and --rounds must be at least 1")
    return report("group", asyncio.run(bench(args.n, args.rounds, args.setup)), args)

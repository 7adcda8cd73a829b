"""``coding-agent-rl bench agents``: what each agent CLI costs per rollout, in the same run.

Every registered harness (or ``--agents``) runs the replay policy on one bundled task, one
rollout at a time, the CLIs interleaved over ``--rounds`` (the order rotates each round), after
one untimed warm-up rollout each. Per CLI: the agent sandbox's CPU seconds while the CLI ran
(``agent_cpu_s`` of the rollout record: the sandbox's control group, read on this host, so it
counts the CLI and every process it started), the CLI's wall time (``agent_s``) and the
rollout's (``total_s``), medians over the rounds, and their ratios to ``--baseline``'s
(default Claude Code) measured the same way in the same run.

Targets, per CLI: the rollout is solved, its CPU seconds were measured, and the CPU ratio to the
baseline stays within :data:`TARGET_CPU_RATIO`: not a quality bar (the Node.js CLIs measure
2-6x) but a spin detector: a CLI that keeps a core busy while it waits on the policy uses about
its wall time in CPU, tens of times the baseline's. A missed target exits 1 unless ``--no-check``.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import tempfile
import uuid
from typing import Any

from coding_agent_rl.commands.bench import Target, add_check_argument, missed_targets, report
from coding_agent_rl.commands.bench.rollout import TASKS, bench, outcome_of

TARGET_CPU_RATIO = 10.0


def _p50(xs: list[float | None]) -> float | None:
    """The median; None (not measured) when any rollout lacks the figure."""
    if not xs or any(x is None for x in xs):
        return None
    return round(statistics.median(x for x in xs if x is not None), 3)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def per_agent(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One CLI's figures from its timed rollouts' records."""
    timings = [r.get("timings") or {} for r in records]
    return {
        "rollouts": len(records),
        "solved": sum(outcome_of(r) == "solved" for r in records),
        "agent_cpu_s_p50": _p50([r.get("agent_cpu_s") for r in records]),
        "agent_s_p50": _p50([t.get("agent_s") for t in timings]),
        "total_s_p50": _p50([t.get("total_s") for t in timings]),
        "failure_reasons": sorted(
            {
                str(r.get("abort_reason") or r.get("fail_reason"))
                for r in records
                if outcome_of(r) != "solved"
            }
        )[:3],
    }


def summarize(
    by_agent: dict[str, list[dict[str, Any]]], *, baseline: str, rounds: int, **info: Any
) -> dict[str, Any]:
    """The result: per CLI figures, ratios to ``baseline``, targets and the ones missed."""
    agents = {name: per_agent(recs) for name, recs in by_agent.items()}
    base = agents.get(baseline, {})
    figures: dict[str, Any] = {}
    targets: dict[str, Target] = {}
    for name, a in agents.items():
        a["cpu_ratio"] = _ratio(a["agent_cpu_s_p50"], base.get("agent_cpu_s_p50"))
        a["agent_wall_ratio"] = _ratio(a["agent_s_p50"], base.get("agent_s_p50"))
        a["total_wall_ratio"] = _ratio(a["total_s_p50"], base.get("total_s_p50"))
        figures[f"{name}.solved"] = a["solved"]
        figures[f"{name}.agent_cpu_s_p50"] = a["agent_cpu_s_p50"]
        figures[f"{name}.cpu_ratio"] = a["cpu_ratio"]
        targets[f"{name}.solved"] = ("==", float(rounds))
        targets[f"{name}.agent_cpu_s_p50"] = (">", 0.0)
        targets[f"{name}.cpu_ratio"] = ("<=", TARGET_CPU_RATIO)
    return {
        **info,
        "rounds": rounds,
        "agents": agents,
        "baseline": {
            "kind": "run",
            "agent": baseline,
            "from": f"{baseline} on the same task, interleaved with the others in this run",
        },
        "targets": {k: f"{op} {b:g}" for k, (op, b) in targets.items()},
        "targets_missed": missed_targets(figures, targets),
    }


async def bench_agents(
    names: list[str],
    *,
    task: str,
    rounds: int,
    warmup: bool,
    backend: str,
    out: pathlib.Path,
    sandbox_options: dict[str, Any],
) -> dict[str, list[dict[str, Any]]]:
    """Each CLI's timed records (warm-up rollouts dropped), the CLIs interleaved."""
    by_agent: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    plan = [("warmup", n) for n in names] if warmup else []
    for i in range(rounds):
        k = i % len(names)
        plan += [(f"r{i}", n) for n in names[k:] + names[:k]]
    for label, name in plan:
        _, records = await bench(
            n=1,
            concurrency=1,
            agent=name,
            backend=backend,
            out=out / f"{label}-{name}",
            sandbox_options=sandbox_options,
            task=task,
        )
        if label != "warmup":
            by_agent[name].extend(records)
    return by_agent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents", help="comma list of harness names (default: every registered one)"
    )
    parser.add_argument("--baseline", default="claude_code", help="the CLI the ratios are to")
    parser.add_argument("--task", help="bundled task id (default: the first bundled task)")
    parser.add_argument("--rounds", type=int, default=1, help="timed rollouts per CLI")
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed warm-up rollout per CLI"
    )
    parser.add_argument("--sandbox", default="docker", help="sandbox backend")
    parser.add_argument("--out", type=pathlib.Path, help="keep the run folders here")
    parser.add_argument(
        "--sandbox-option", action="append", default=[], metavar="KEY=VALUE",
        help="backend option, e.g. run_id=NAME (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.commands.run import parse_options
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.errors import UserError
    from coding_agent_rl.harness import HARNESSES

    known = HARNESSES.names()
    names = [x.strip() for x in args.agents.split(",") if x.strip()] if args.agents else known
    unknown = [n for n in [*names, args.baseline] if n not in known]
    if unknown:
        raise UserError(f"unknown agent(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if args.baseline not in names:
        names = [args.baseline, *names]
    if args.rounds < 1:
        raise UserError("--rounds must be at least 1")
    ids = [r.instance_id for r in load_dataset(TASKS)]
    task = args.task or ids[0]
    if task not in ids:
        raise UserError(f"--task {task!r} is not a bundled task; bundled: {', '.join(ids)}")
    if args.sandbox == "docker":
        from coding_agent_rl.images.dataset import build_dataset_images

        build_dataset_images(TASKS)
    options = parse_options(args.sandbox_option)
    if args.sandbox == "docker":
        options.setdefault("run_id", f"bench-agents-{uuid.uuid4().hex[:8]}")
    with tempfile.TemporaryDirectory(prefix="car-bench-agents-") as tmp:
        by_agent = asyncio.run(
            bench_agents(
                names,
                task=task,
                rounds=args.rounds,
                warmup=not args.no_warmup,
                backend=args.sandbox,
                out=args.out or pathlib.Path(tmp),
                sandbox_options=options,
            )
        )
    result = summarize(
        by_agent, baseline=args.baseline, rounds=args.rounds, task=task, backend=args.sandbox
    )
    return report("agents", result, args)

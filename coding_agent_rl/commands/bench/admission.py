"""``coding-agent-rl bench admission``: ``--n`` sandboxes requested at once, admission control
on vs off (sandbox/admission.py), same run.

- on: the settings' cap on creations in flight (``boot_concurrency``), jittered starts, the
  per-attempt timeout retried with backoff (``create_timeout_s``, ``create_timeout_attempts``);
- off (the baseline, ``kind: run``): no cap, no jitter, one attempt (what a caller that creates
  them all with ``asyncio.gather`` gets from the engine).

Figures per mode: failures, time from the request to a ready sandbox (p50 / p99), wall time.
Each sandbox is the agent sandbox's shape (default limits, capped disk, least privilege, no
network). Targets: no failures with admission on, and its p99 time to ready no worse than 1.1x
the baseline's. Slow on a small machine (64 capped disks): a scale benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from coding_agent_rl.commands.bench import (
    Target,
    add_check_argument,
    missed_targets,
    report,
    target_table,
)

TARGETS: dict[str, Target] = {"failures_on": ("==", 0), "p99_ratio": ("<=", 1.1)}
OFF_CAP = 100_000


def _q(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


async def _burst(n: int, image: str, on: bool) -> dict[str, Any]:
    from coding_agent_rl import settings
    from coding_agent_rl.sandbox import admission, create_sandbox

    conf = settings.current()
    if not on:
        conf = conf.model_copy(
            update={"boot_concurrency": OFF_CAP, "admission_jitter_s": 0.0, "create_timeout_s": 0}
        )
    run_id = f"bench-admission-{uuid.uuid4().hex[:8]}"
    timeouts = admission.STATS["docker"].timeouts
    ready: list[float] = []
    errors: list[str] = []
    boxes: list[Any] = []

    async def one() -> None:
        t0 = time.monotonic()
        try:
            # Off: the engine's own retries on transient errors stay (both sides have them).
            make = lambda: create_sandbox("docker", image, run_id=run_id, network="none")  # noqa: E731
            sb = await admission.start(make, attempts=None if on else 1)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {str(e)[:160]}")
            return
        ready.append(time.monotonic() - t0)
        boxes.append(sb)

    with settings.using(conf):
        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(n)))
        wall = time.monotonic() - t0
        await asyncio.gather(*(b.close() for b in boxes))
    return {
        "failures": len(errors),
        "errors": sorted(set(errors))[:3],
        "ready_s_p50": _q(ready, 0.5),
        "ready_s_p99": _q(ready, 0.99),
        "wall_s": round(wall, 2),
        "timeouts": admission.STATS["docker"].timeouts - timeouts,
    }


def _merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several bursts of one mode: failures summed, the latency figures' medians."""
    out: dict[str, Any] = {"failures": sum(r["failures"] for r in runs)}
    out["errors"] = sorted({e for r in runs for e in r["errors"]})[:3]
    out["timeouts"] = sum(r["timeouts"] for r in runs)
    for key in ("ready_s_p50", "ready_s_p99", "wall_s"):
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = round(statistics.median(values), 3) if values else None
        out[f"{key}_all"] = [r[key] for r in runs]
    return out


async def bench(n: int, image: str, rounds: int = 2) -> dict[str, Any]:
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for i in range(rounds):  # alternate which goes first: load drift hits both alike
        for mode in (False, True) if i % 2 == 0 else (True, False):
            runs[mode].append(await _burst(n, image, on=mode))
    on, off = _merge(runs[True]), _merge(runs[False])
    p99_on, p99_off = on["ready_s_p99"], off["ready_s_p99"]
    result: dict[str, Any] = {
        "n": n,
        "rounds": rounds,
        "on": on,
        "off": off,
        "failures_on": on["failures"],
        "failures_off": off["failures"],
        "p99_ratio": round(p99_on / p99_off, 3) if p99_on and p99_off else None,
        "p50_ratio": (
            round(on["ready_s_p50"] / off["ready_s_p50"], 3)
            if on["ready_s_p50"] and off["ready_s_p50"]
            else None
        ),
        "baseline": {
            "kind": "run",
            "from": f"in this run, alternating with ours: the same {n} sandboxes requested at "
            "once with admission control off (no cap, no jitter, one attempt)",
        },
        "targets": target_table(TARGETS),
    }
    result["targets_missed"] = missed_targets(result, TARGETS)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=64, help="sandboxes requested at once")
    parser.add_argument("--image", default="coding-agent-rl/base:latest")
    parser.add_argument("--rounds", type=int, default=2, help="on/off pairs, alternating")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError

    if args.n < 1 or args.rounds < 1:
        raise UserError("--n and --rounds must be at least 1")
    return report("admission", asyncio.run(bench(args.n, args.image, args.rounds)), args)

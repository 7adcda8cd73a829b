"""``coding-agent-rl bench scale``: the orchestrator's own cost as rollouts in flight grow.

Each level runs in a fresh orchestrator process: N native-loop rollouts on real local
(bubblewrap) sandboxes, all in flight at once, a scripted policy that thinks ``--think-s`` per
turn (no model server), records through the run writer. Per level: the process's own CPU
(``RUSAGE_SELF``: all its threads, no children) per rollout and per turn, its RSS growth per
rollout in flight, event-loop lag p99, records and turns per second. Baseline: the lowest level
of the same run. Method and figures: docs/scale.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import threading
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

DEFAULT_LEVELS = (16, 64, 128, 512)
TARGETS: dict[str, Target] = {
    "cpu_ratio_top_vs_base": ("<=", 1.5),  # CPU-ms per rollout, highest level / lowest
    "rss_mib_per_rollout_max": ("<=", 4.0),
    "loop_lag_ms_p99_max": ("<=", 50.0),
    "in_flight_fraction_min": ("==", 1.0),  # every level had all its rollouts in flight at once
    "failures": ("==", 0),
}
TICK_S = 0.02
GROW_BYTES = 16 << 20  # --grow: what each rollout keeps (a leaked per-session buffer)
GROW_WORK = bytes(16 << 20)  # --grow: hashed once per session in flight, every turn
IMAGE = "coding-agent-rl/example-slugify:latest"
COMMANDS = ("ls -la", "cat setup.py 2>/dev/null | head -20", "git status --short", "echo ok")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _q(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


class ThinkingPolicy:
    """A scripted policy in this process: each turn sleeps ``think_s`` (a remote model's
    latency, no CPU here) then returns the next pre-encoded tool call, ``submit`` last."""

    def __init__(self, outputs: list[list[int]], think_s: float, grow: bool = False):
        from coding_agent_rl.model.sglang import Generation

        self._make = Generation
        self.outputs = outputs
        self.think_s = think_s
        self.grow = grow
        self.turn: dict[str, int] = {}

    async def generate(self, input_ids, sampling_params, *, routing_key):
        await asyncio.sleep(self.think_s)
        if self.grow:  # --grow: O(sessions in flight) work per turn, in this process
            for _ in self.turn:
                hashlib.sha256(GROW_WORK).digest()
        i = self.turn.get(routing_key, 0)
        self.turn[routing_key] = i + 1
        ids = self.outputs[min(i, len(self.outputs) - 1)]
        return self._make(list(ids), [-0.1] * len(ids), "stop", weight_version="bench")

    def done(self, routing_key: str) -> None:
        self.turn.pop(routing_key, None)


def _outputs(encoder: Any, turns: int) -> list[list[int]]:
    out = []
    for i in range(turns):
        last = i == turns - 1
        call = (
            {"name": "submit", "arguments": {}}
            if last
            else {"name": "bash", "arguments": {"command": COMMANDS[i % len(COMMANDS)]}}
        )
        message = {
            "role": "assistant",
            "content": "Looking." if not last else "Done.",
            "tool_calls": [{"type": "function", "function": call}],
        }
        out.append(list(encoder.renderer.canonical_output(message)))
    return out


class Ticker:
    """Sleeps ``TICK_S`` in a loop; its lateness is the event loop's lag. Samples RSS too."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.rss_peak = 0
        self.threads_peak = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(TICK_S)
            self.lags.append(max(0.0, time.monotonic() - t0 - TICK_S))
            self.rss_peak = max(self.rss_peak, _rss_bytes())
            self.threads_peak = max(self.threads_peak, threading.active_count())

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


async def _level(n: int, turns: int, think_s: float, grow: bool, out: pathlib.Path) -> dict:
    """One level in this process (see the module docstring)."""
    from coding_agent_rl.datasets import examples_dataset
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.env.encoding import ChatEncoder
    from coding_agent_rl.env.episode import ABORTED
    from coding_agent_rl.env.loop import run_episode
    from coding_agent_rl.env.sample import fill_sample
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.native import NativeAct, NativeOptions, setup_agent_user
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.sandbox import admission, create_sandbox
    from coding_agent_rl.tokenizer import load_tokenizer
    from coding_agent_rl.types import Sample

    rows = [r for r in load_dataset(examples_dataset()) if r.image == IMAGE]
    row = rows[0]
    encoder = ChatEncoder(load_tokenizer("qwen3"))
    policy = ThinkingPolicy(_outputs(encoder, turns), think_s, grow)
    run_id = f"bench-scale-{uuid.uuid4().hex[:8]}"
    config = RolloutConfig(backend="local", max_turns=turns)
    act = NativeAct(engine=policy, encoder=encoder, config=config, options=NativeOptions())
    writer = RunWriter(out)
    kept: list[bytes] = []  # --grow only
    ready = 0
    all_ready = asyncio.Event()
    failures: list[str] = []
    in_flight = 0
    in_flight_peak = 0
    turns_done = 0
    ticker = Ticker()

    async def rollout(i: int, warm: bool = False) -> None:
        nonlocal ready, in_flight, in_flight_peak, turns_done
        sid = f"{run_id}-{i}"
        options = await act.sandbox_options(row)
        sb = None
        try:
            sb = await admission.start(lambda: create_sandbox("local", row.image, **options))
            await setup_agent_user(sb, act.options.user, row.workdir)
        except Exception as e:  # counted; the others go on (the barrier must still open)
            failures.append(f"set-up: {type(e).__name__}: {str(e)[:200]}")
            if sb is not None:
                await sb.close()
            sb = None
        if not warm:
            ready += 1
            if ready == n:
                all_ready.set()
        if sb is None:
            return
        try:
            if not warm:
                await all_ready.wait()
                await asyncio.sleep(think_s * i / n)  # staggered: turns spread over the think
            in_flight += 1
            in_flight_peak = max(in_flight_peak, in_flight)
            env = act.make_env(row, sb)
            try:
                episode = await run_episode(
                    env,
                    engine=policy,
                    encoder=encoder,
                    sampling_params={"max_new_tokens": 512},
                    config=act.loop_config(),
                    routing_key=sid,
                )
            finally:
                await env.close()
                policy.done(sid)
            if grow:  # --grow: a per-rollout buffer kept for the run
                kept.append(os.urandom(16) * (GROW_BYTES // 16))
            turns_done += len(episode.turns)
            record: dict[str, Any] = {
                "instance_id": row.instance_id,
                "sample_index": i,
                "turns": len(episode.turns),
                "failure_kind": "infra" if episode.status == ABORTED else None,
                "reward": None,
                "abort_reason": episode.reason if episode.status == ABORTED else None,
            }
            samples: list[Sample] = []
            if episode.status != ABORTED:
                sample = Sample(index=i, prompt=row.prompt, metadata={"instance_id": sid})
                fill_sample(sample, episode, decode=act.decode, reward=0.0)
                samples.append(sample)
            else:
                failures.append(f"{episode.end}: {episode.reason}")
            if not warm:
                writer.add(samples, record)
                ticker.rss_peak = max(ticker.rss_peak, _rss_bytes())  # besides every tick
            in_flight -= 1
        finally:
            await sb.close()

    policy.think_s = 0.0
    await rollout(-1, warm=True)  # imports, caches, the tokenizer's first calls
    policy.think_s = think_s
    turns_done = 0
    gc.collect()
    base_rss = _rss_bytes()
    ticker.start()
    cpu0 = _cpu_s()
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(rollout(i)) for i in range(n)]
    await all_ready.wait()
    cpu_ready, t_ready = _cpu_s(), time.monotonic()
    lags_before = len(ticker.lags)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    cpu1, t1 = _cpu_s(), time.monotonic()
    await ticker.stop()
    failures += [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    writer.close({"n": n})
    lags = ticker.lags[lags_before:]
    phase_s = t1 - t_ready
    records = len(writer.results)
    return {
        "level": n,
        "turns": turns_done,
        "failures": len(failures),
        "failure_reasons": sorted(set(failures))[:3],
        "in_flight_peak": in_flight_peak,
        "cpu_ms_per_rollout": round(1000 * (cpu1 - cpu_ready) / n, 2),
        "cpu_ms_per_turn": round(1000 * (cpu1 - cpu_ready) / max(1, turns_done), 3),
        "cpu_ms_per_rollout_setup": round(1000 * (cpu_ready - cpu0) / n, 2),
        "cpu_share": round((cpu1 - cpu_ready) / phase_s, 3),
        "rss_mib_per_rollout": round((ticker.rss_peak - base_rss) / n / 2**20, 3),
        "rss_base_mib": round(base_rss / 2**20, 1),
        "threads_peak": ticker.threads_peak,
        "loop_lag_ms_p99": round(1000 * (_q(lags, 0.99) or 0.0), 2),
        "loop_lag_ms_max": round(1000 * max(lags, default=0.0), 2),
        "records_per_s": round(records / phase_s, 2),
        "turns_per_s": round(turns_done / phase_s, 2),
        "setup_s": round(t_ready - t0, 2),
        "phase_s": round(phase_s, 2),
    }


def _child(args: argparse.Namespace) -> int:
    """One level, in this (fresh) process; prints its JSON line."""
    from coding_agent_rl import settings

    with settings.using(settings.load()), tempfile.TemporaryDirectory(prefix="car-scale-") as tmp:
        result = asyncio.run(
            _level(args.level, args.turns, args.think_s, args.grow, pathlib.Path(tmp))
        )
    print(json.dumps(result))
    return 0


def _run_level(n: int, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", __name__, "--level", str(n), "--turns", str(args.turns)]
    argv += ["--think-s", str(args.think_s), *(["--grow"] if args.grow else [])]
    proc = subprocess.run(argv, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"level": n, "failures": n, "failure_reasons": [tail[:300]]}
    return dict(json.loads(lines[-1]))


def bench(args: argparse.Namespace) -> dict[str, Any]:
    levels = [_run_level(n, args) for n in sorted(set(args.levels))]
    base, top = levels[0], levels[-1]
    cpu_base, cpu_top = base.get("cpu_ms_per_rollout"), top.get("cpu_ms_per_rollout")

    def worst(key: str) -> float | None:
        values = [lv.get(key) for lv in levels]
        return None if any(v is None for v in values) else max(v for v in values if v is not None)

    fractions = [lv.get("in_flight_peak", 0) / lv["level"] for lv in levels]
    result: dict[str, Any] = {
        "bench": "scale",
        "turns_per_rollout": args.turns,
        "think_s": args.think_s,
        "grow": args.grow,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "levels": levels,
        "cpu_ratio_top_vs_base": round(cpu_top / cpu_base, 3) if cpu_base and cpu_top else None,
        "rss_mib_per_rollout_max": worst("rss_mib_per_rollout"),
        "loop_lag_ms_p99_max": worst("loop_lag_ms_p99"),
        "in_flight_fraction_min": min(fractions),
        "failures": sum(lv.get("failures", 0) for lv in levels),
        "baseline": {
            "kind": "run",
            "from": f"the lowest level ({base['level']} rollouts in flight) in this run, "
            "measured the same way, in its own fresh process like every level",
        },
        "targets": target_table(TARGETS),
    }
    result["targets_missed"] = missed_targets(result, TARGETS)
    return result


def _levels(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--levels",
        type=_levels,
        default=list(DEFAULT_LEVELS),
        help="rollouts in flight per level, comma-separated (default 16,64,128,512)",
    )
    parser.add_argument("--turns", type=int, default=6, help="policy turns per rollout")
    parser.add_argument("--think-s", type=float, default=2.0, help="policy think time per turn")
    parser.add_argument("--grow", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError
    from coding_agent_rl.sandbox.local_view import bwrap_reason

    if not args.levels or min(args.levels) < 1 or args.turns < 2 or args.think_s < 0:
        raise UserError("--levels are positive integers, --turns >= 2, --think-s >= 0")
    if (why := bwrap_reason()) is not None:
        raise UserError(f"bench scale runs on the local (bubblewrap) backend: {why}")
    from coding_agent_rl.datasets import examples_dataset
    from coding_agent_rl.images.dataset import build_dataset_images

    build_dataset_images(examples_dataset(), kind="rootfs")  # up to date: about a second
    return report("scale", bench(args), args)


if __name__ == "__main__":
    child = argparse.ArgumentParser()
    child.add_argument("--level", type=int, required=True)
    child.add_argument("--turns", type=int, required=True)
    child.add_argument("--think-s", type=float, required=True)
    child.add_argument("--grow", action="store_true")
    sys.exit(_child(child.parse_args()))

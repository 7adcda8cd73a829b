"""``coding-agent-rl bench multimodal``: per-turn training tensors merged once vs every turn.

Builds ``multimodal_train_inputs`` from real Qwen2-VL processor chunks both ways, each in its own
child process: time, bytes copied (torch's profiler) and peak RSS at two sizes. Method:
docs/modules/bench.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import time
from typing import Any

from coding_agent_rl.commands.bench import (
    Target,
    add_check_argument,
    missed_targets,
    report,
    target_table,
)

TARGETS: dict[str, Target] = {
    "speedup_at_turns": (">=", 2.0),  # every-turn time / merge-once time
    "copied_ratio_at_turns": (">=", 5.0),  # bytes copied, every-turn / merge-once
    "merge_once_copied_over_total": ("==", 1.0),  # merge once copies each byte exactly once
    "peak_ratio_at_turns": ("<=", 1.1),  # merge-once peak RSS growth / every-turn's
}


def _chunk(size: int) -> dict[str, Any]:
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    processor = Qwen2VLImageProcessorPil()  # Qwen2-VL's defaults
    image = Image.new("RGB", (size, size), (90, 140, 200))
    out = processor(images=[image], return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def _merge(way: str, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The work measured: one sample's chunks merged ``way``."""
    from coding_agent_rl.multimodal.buffer import TrainInputsBuffer, merge_every_turn

    if way == "once":
        buf = TrainInputsBuffer()
        for c in chunks:
            buf.add(c)
        merged = buf.merge()
    else:
        merged = None
        for c in chunks:
            merged = merge_every_turn(merged, c)
    assert merged is not None
    return merged


def allocated_bytes(fn: Any) -> int:
    """Bytes torch allocated while ``fn()`` ran, measured by its profiler (each op's own
    allocations, frees not subtracted): for a merge, the bytes its concatenations copied."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(max(e.self_cpu_memory_usage, 0) for e in prof.events())


def child(way: str, turns: int, size: int, repeat: int) -> dict[str, Any]:
    """One way, measured in this (fresh) process: ``repeat`` timed runs (best kept), then one
    run under torch's memory profiler for the bytes allocated."""
    import resource

    base = _chunk(size)
    chunks = [{k: v.clone() for k, v in base.items()} for _ in range(turns)]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    best, digest = math.inf, ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        merged = _merge(way, chunks)
        best = min(best, time.perf_counter() - t0)
        digest = hashlib.sha256(merged["pixel_values"].numpy().data).hexdigest()[:16]  # no copy
        del merged  # the next run starts from the chunks alone (peak: one run's own)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    copied = allocated_bytes(lambda: _merge(way, chunks))
    return {
        "time_ms": round(best * 1000, 3),
        "copied_bytes": copied,
        "total_bytes": sum(v.element_size() * v.numel() for c in chunks for v in c.values()),
        "peak_rss_growth_bytes": max(peak, 0),
        "digest": digest,
    }


def _run_child(way: str, turns: int, size: int, repeat: int) -> dict[str, Any]:
    code = (
        "import json,sys; from coding_agent_rl.commands.bench.multimodal import child; "
        f"print(json.dumps(child({way!r}, {turns}, {size}, {repeat})))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"bench multimodal child ({way}, {turns}) failed: {r.stderr[-1500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(turns: int, size: int, repeat: int) -> dict[str, Any]:
    half = max(1, turns // 2)
    runs = {
        (way, n): _run_child(way, n, size, repeat)
        for n in (half, turns)
        for way in ("once", "every")
    }
    once, every = runs[("once", turns)], runs[("every", turns)]

    def exponent(way: str, key: str) -> float | None:
        a, b = runs[(way, half)][key], runs[(way, turns)][key]
        if half == turns or a <= 0 or b <= 0:
            return None
        return round(math.log(b / a) / math.log(turns / half), 2)

    result: dict[str, Any] = {
        "bench": "multimodal",
        "turns": turns,
        "image_size": size,
        "chunk_bytes": once["total_bytes"] // turns,
        "merge_once": {f"{k}_at_{n}": runs[("once", n)][k] for n in (half, turns) for k in ("time_ms", "copied_bytes", "peak_rss_growth_bytes")},
        "every_turn": {f"{k}_at_{n}": runs[("every", n)][k] for n in (half, turns) for k in ("time_ms", "copied_bytes", "peak_rss_growth_bytes")},
        "time_exponent": {"merge_once": exponent("once", "time_ms"), "every_turn": exponent("every", "time_ms")},
        "copied_exponent": {"merge_once": exponent("once", "copied_bytes"), "every_turn": exponent("every", "copied_bytes")},
        "speedup_at_turns": round(every["time_ms"] / once["time_ms"], 2) if once["time_ms"] else None,
        "copied_ratio_at_turns": round(every["copied_bytes"] / once["copied_bytes"], 2),
        "merge_once_copied_over_total": round(once["copied_bytes"] / once["total_bytes"], 4),
        "peak_ratio_at_turns": round(once["peak_rss_growth_bytes"] / every["peak_rss_growth_bytes"], 3) if every["peak_rss_growth_bytes"] else None,
        "results_identical": once["digest"] == every["digest"],
        "baseline": {
            "kind": "modelled",
            "models": "a rollout that concatenates its image tensors after every turn; no "
            "production code does (slime collects them per sample): merge_every_turn was "
            "written for this benchmark",
            "from": "merge_every_turn run on the same chunks, in a child process of the same "
            "command, one after the other; time, allocations and peak measured like ours",
        },
        "targets": target_table(TARGETS),
    }  # fmt: skip
    missed = missed_targets(result, TARGETS)
    if not result["results_identical"]:
        missed.append("results_identical == true (got false)")
    result["targets_missed"] = missed
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=20, help="image-bearing turns per sample")
    parser.add_argument("--size", type=int, default=448, help="screenshot side in pixels")
    parser.add_argument("--repeat", type=int, default=5, help="runs per way (best time kept)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError

    if args.turns < 2 or args.size < 28 or args.repeat < 1:
        raise UserError("--turns >= 2, --size >= 28 and --repeat >= 1")
    return report("multimodal", measure(args.turns, args.size, args.repeat), args)

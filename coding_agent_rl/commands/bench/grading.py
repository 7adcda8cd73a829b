"""``coding-agent-rl bench grading``: what the tamper defences cost, against plain ``pytest -rA``.

Times the defended, twin and plain test steps on the bundled tasks' gold patches, interleaved;
``ratio`` = median(defended) / median(plain) (target <= 1.3). Method: docs/modules/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from typing import Any

from coding_agent_rl.datasets import examples_dataset
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.settings import default

TARGET_RATIO = 1.3
TASKS = examples_dataset()
LOOSE = Defences(strict_compare=False)  # every defence but the grader's equality


def _p50(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def _graded(prepared: Any, row: Any, defences: Any) -> Any:
    from coding_agent_rl.grading.protocols import Graded
    from coding_agent_rl.grading.result import GradeResult

    return Graded(
        prepared.sb,
        row,
        prepared.runner,
        prepared.base,
        [],
        GradeResult(),
        row.test_timeout or default("eval_timeout_s"),
        prepared,
        defences,
    )


def _swap_script(prepared: Any, row: Any, which: str) -> str:
    """Put the blinded test files (``staged``) or the task's own (``view``: base + test patch)
    in the workdir, so that both ways run in the same sandbox on their own files."""
    from coding_agent_rl.grading.workspace import q

    d = prepared.runner.dir
    return f"cd {q(row.workdir)}\n" + "".join(
        f"cp -- {q(f'{d}/{which}/{path}')} {q(path)}\n" for path in prepared.staged
    )


async def one_task(row: Any, *, backend: str, options: dict[str, Any], repeat: int) -> dict:
    from coding_agent_rl.datasets.logparse import parse_pytest
    from coding_agent_rl.grading.defences import ROUND_1
    from coding_agent_rl.grading.evidence import plugin_verdict
    from coding_agent_rl.grading.grade import grade
    from coding_agent_rl.grading.prepared import GradingSandbox
    from coding_agent_rl.grading.protocols import default_test_cmd
    from coding_agent_rl.grading.workspace import run_checked

    async with (
        GradingSandbox(row, backend=backend, sandbox_options=options) as ahead,
        GradingSandbox(row, backend=backend, sandbox_options=options) as twin,
        GradingSandbox(row, backend=backend, sandbox_options=options, defences=ROUND_1) as old,
        GradingSandbox(row, backend=backend, sandbox_options=options, defences=LOOSE) as loose,
    ):
        prepared, prepared2, _, prepared3 = await asyncio.gather(
            ahead.ready(), twin.ready(), old.ready(), loose.ready()
        )
        t0 = time.monotonic()
        old_result = await grade(row, row.patch, sandbox=old)
        old_grade_s = time.monotonic() - t0
        t0 = time.monotonic()
        result = await grade(row, row.patch, sandbox=ahead)
        grade_s = time.monotonic() - t0
        twin_result = await grade(row, row.patch, sandbox=twin)
        loose_result = await grade(row, row.patch, sandbox=loose)
        g, g2 = _graded(prepared, row, ahead.defences), _graded(prepared2, row, twin.defences)
        g3 = _graded(prepared3, row, loose.defences)
        cmd = default_test_cmd(row)

        async def one_defended(gr: Any) -> None:
            p = gr.prepared
            run = await gr.run_plugin(cmd)
            verdict = plugin_verdict(row, run, p.key, p.canaries, gr.timeout, p.blinding)
            assert verdict.statuses and not verdict.evidence and not verdict.ambiguous, verdict

        async def defended() -> float:
            t = time.monotonic()
            await one_defended(g)
            return time.monotonic() - t

        async def native_compare() -> float:
            t = time.monotonic()
            await one_defended(g3)
            return time.monotonic() - t

        async def twin_run() -> float:
            t = time.monotonic()
            await asyncio.gather(one_defended(g), one_defended(g2))
            return time.monotonic() - t

        async def plain() -> float:
            await run_checked(prepared.sb, _swap_script(prepared, row, "view"), "task files")
            t = time.monotonic()
            run = await prepared.runner.run(cmd, timeout=g.timeout)
            elapsed = time.monotonic() - t
            assert parse_pytest(run.log), run.log[-500:]
            await run_checked(prepared.sb, _swap_script(prepared, row, "staged"), "blinded files")
            return elapsed

        ways = [defended, plain, twin_run, native_compare]
        times: dict[str, list[float]] = {fn.__name__: [] for fn in ways}
        for i in range(repeat):
            k = i % len(ways)
            for fn in ways[k:] + ways[:k]:  # rotate: load hits each way alike
                times[fn.__name__].append(await fn())
    d, p = statistics.median(times["defended"]), statistics.median(times["plain"])
    tw = statistics.median(times["twin_run"])
    nc = statistics.median(times["native_compare"])
    return {
        "instance_id": row.instance_id,
        "reward": min(result.reward, old_result.reward, twin_result.reward, loose_result.reward),
        "result_method": result.result_method,
        "canaries": result.canaries,
        "blinded": (result.blinding or {}).get("tests", 0),
        "defended_s": round(d, 4),
        "plain_s": round(p, 4),
        "twin_s": round(tw, 4),
        "native_compare_s": round(nc, 4),
        "strict_compare_ratio": round(d / nc, 3),
        "ratio": round(d / p, 3),
        "twin_ratio": round(tw / p, 3),
        "grade_s": round(grade_s, 3),
        "round1_grade_s": round(old_grade_s, 3),
        "prepare_s": round(ahead.prepare_s or 0.0, 3),
        "round1_prepare_s": round(old.prepare_s or 0.0, 3),
    }


async def bench(*, n: int, repeat: int, backend: str, options: dict[str, Any]) -> dict[str, Any]:
    from coding_agent_rl.datasets.schema import load_dataset

    tasks = load_dataset(TASKS)
    rows = [tasks[i % len(tasks)] for i in range(n)]
    per_task = [
        await one_task(row, backend=backend, options=options, repeat=repeat) for row in rows
    ]
    ratio = _p50([t["ratio"] for t in per_task])
    return {
        "n": n,
        "repeat": repeat,
        "backend": backend,
        "defended_s_p50": _p50([t["defended_s"] for t in per_task]),
        "plain_s_p50": _p50([t["plain_s"] for t in per_task]),
        "twin_s_p50": _p50([t["twin_s"] for t in per_task]),
        "ratio": ratio,
        "twin_ratio": _p50([t["twin_ratio"] for t in per_task]),
        "native_compare_s_p50": _p50([t["native_compare_s"] for t in per_task]),
        "strict_compare_ratio": _p50([t["strict_compare_ratio"] for t in per_task]),
        "target_ratio": TARGET_RATIO,
        "target_met": ratio is not None and ratio <= TARGET_RATIO,
        "grade_s_p50": _p50([t["grade_s"] for t in per_task]),
        "round1_grade_s_p50": _p50([t["round1_grade_s"] for t in per_task]),
        "grading_ratio": _p50([t["grade_s"] / t["round1_grade_s"] for t in per_task]),
        "prepare_s_p50": _p50([t["prepare_s"] for t in per_task]),
        "round1_prepare_s_p50": _p50([t["round1_prepare_s"] for t in per_task]),
        "all_solved": all(t["reward"] == 1.0 for t in per_task),
        "tasks": per_task,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=6, help="tasks (the example tasks, cycled)")
    parser.add_argument("--repeat", type=int, default=5, help="test runs per way, per task")
    parser.add_argument("--sandbox", default="docker", help="sandbox backend")
    parser.add_argument(
        "--sandbox-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="backend option, e.g. run_id=NAME (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument(
        "--no-check", action="store_true", help="exit 0 even when the target ratio is missed"
    )


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.commands.run import parse_options
    from coding_agent_rl.errors import UserError

    if args.n < 1 or args.repeat < 1:
        raise UserError("--n and --repeat must be at least 1")
    options = parse_options(args.sandbox_option)
    if args.sandbox == "docker":
        from coding_agent_rl.images.dataset import build_dataset_images

        build_dataset_images(TASKS)
        options.setdefault("run_id", f"bench-grading-{uuid.uuid4().hex[:8]}")
    result = asyncio.run(bench(n=args.n, repeat=args.repeat, backend=args.sandbox, options=options))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            if key != "tasks":
                print(f"{key:16} {value}")
    if not result["all_solved"]:
        print("bench grading: a gold patch did not score 1.0", file=sys.stderr)
        return 1
    if not result["target_met"] and not args.no_check:
        print(
            f"bench grading: ratio {result['ratio']} is over the {TARGET_RATIO} target",
            file=sys.stderr,
        )
        return 1
    return 0

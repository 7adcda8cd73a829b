"""``coding-agent-rl validate --dataset FILE``: gold patches solve, no-op runs fail, no flakes."""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys

from coding_agent_rl.datasets.schema import DatasetError, load_dataset
from coding_agent_rl.errors import UserError
from coding_agent_rl.grading.validate import RowReport, validate_rows
from coding_agent_rl.settings import default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, help="JSONL dataset file")
    parser.add_argument(
        "--sandbox", default=default("sandbox"), help="sandbox backend (default %(default)s)"
    )
    parser.add_argument("--out", help="write one JSON report per row to this JSONL file")
    parser.add_argument("--concurrency", type=int, default=2, help="rows validated at once")
    parser.add_argument("--runs", type=int, default=2, help="repetitions to catch flaky tests")
    parser.add_argument(
        "--timeout",
        type=float,
        default=default("eval_timeout_s"),
        help="test command time limit (s)",
    )
    parser.add_argument("--instance", action="append", help="only this instance_id (repeatable)")
    parser.add_argument(
        "--derive-canaries",
        action="store_true",
        help="derive fresh-input canaries from the gold code into the cache root's store "
        "(grading adds them; docs/modules/grading.md)",
    )


def _leak(r: RowReport) -> str:
    if r.workspace != "ok":
        return "-"
    return f"{len(r.leaks)} found" if r.leaks else "none"


def _table(reports: list[RowReport]) -> str:
    """One line per row: validity, image source, leak check (after the scrub ``run`` does),
    tamper-screen findings on the gold patch (false positives by definition)."""
    width = max([len("instance_id")] + [len(r.instance_id) for r in reports])
    head = (
        f"{'instance_id':<{width}}  {'valid':<5}  {'image':<7}  {'leaks':<8}  {'time':>6}"
        f"  {'screen FP':>9}"
    )
    lines = [f"{head}  reason"]
    for r in reports:
        mark = "yes" if r.valid else "NO"
        lines.append(
            f"{r.instance_id:<{width}}  {mark:<5}  {r.image_source or '-':<7}  {_leak(r):<8}  "
            f"{r.duration_s:>5.1f}s  {r.screen_fp:>9}  {r.reason}"
        )
    bad = sum(not r.valid for r in reports)
    fp = sum(r.screen_fp for r in reports)
    lines.append(
        f"{len(reports) - bad}/{len(reports)} rows valid; tamper-screen false positives on gold "
        f"patches: {fp}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.runs < 1 or args.concurrency < 1:
        raise UserError("--runs and --concurrency must be at least 1")
    try:
        rows = load_dataset(args.dataset)
    except DatasetError as e:
        raise UserError(str(e)) from None
    if args.instance:
        wanted = set(args.instance)
        rows = [r for r in rows if r.instance_id in wanted]
        if missing := wanted - {r.instance_id for r in rows}:
            raise UserError(f"no such instance_id in {args.dataset}: {', '.join(sorted(missing))}")
    reports = asyncio.run(
        validate_rows(
            rows,
            concurrency=args.concurrency,
            backend=args.sandbox,
            runs=args.runs,
            timeout=args.timeout,
            derive_canaries=args.derive_canaries,
        )
    )
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as f:
            for r in reports:
                f.write(json.dumps(r.to_json()) + "\n")
    print(_table(reports))
    for r in reports:
        if not r.valid:
            print(f"invalid: {r.instance_id}: {r.reason}", file=sys.stderr)
    return 0 if all(r.valid for r in reports) else 1

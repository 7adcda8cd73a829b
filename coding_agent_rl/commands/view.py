"""``coding-agent-rl view OUT_DIR -o report.html``: render a run directory as one HTML file."""

from __future__ import annotations

import argparse
from pathlib import Path

from coding_agent_rl.errors import UserError
from coding_agent_rl.report.html import DEFAULT_MAX_ROLLOUTS
from coding_agent_rl.report.load import RESULTS_FILE, SAMPLES_FILE, SUMMARY_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "out_dir", metavar="OUT_DIR", help="a run directory (coding-agent-rl run --out)"
    )
    parser.add_argument(
        "-o", "--output", help="the HTML file to write (default: OUT_DIR/report.html)"
    )
    parser.add_argument(
        "--tokenizer",
        metavar="SPEC",
        help="decode token ids with this tokenizer ('qwen3' or a directory; default: the run's "
        "summary.json 'tokenizer'); token ids are shown when it cannot load",
    )
    parser.add_argument(
        "--max-rollouts",
        type=int,
        default=DEFAULT_MAX_ROLLOUTS,
        metavar="N",
        help=f"embed samples, diffs and logs for the first N rollouts (default {DEFAULT_MAX_ROLLOUTS}; "
        "0 for all); the table always lists every rollout",
    )


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.report.html import render_report

    run_dir = Path(args.out_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory")
    if not any((run_dir / f).is_file() for f in (SUMMARY_FILE, RESULTS_FILE, SAMPLES_FILE)):
        raise UserError(
            f"{run_dir} holds none of {SUMMARY_FILE}, {RESULTS_FILE}, {SAMPLES_FILE}: not a run directory"
        )
    if args.max_rollouts < 0:
        raise UserError("--max-rollouts must be >= 0 (0 embeds every rollout)")
    output = Path(args.output) if args.output else run_dir / "report.html"
    out = render_report(
        run_dir,
        output,
        tokenizer=args.tokenizer,
        max_rollouts=args.max_rollouts or None,
    )
    size = out.stat().st_size
    print(f"wrote {out} ({size / 1024:,.0f} KiB); open it in a browser")
    return 0

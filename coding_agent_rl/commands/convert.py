"""``coding-agent-rl convert --from SOURCE IN OUT.jsonl``: other datasets -> our rows."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from coding_agent_rl.datasets.convert import CONVERTERS, ConvertError, convert_records
from coding_agent_rl.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source", required=True, choices=CONVERTERS.names(), help="dataset kind"
    )
    parser.add_argument(
        "input", help="JSON / JSONL / parquet file or directory (Harbor: task dirs)"
    )
    parser.add_argument("output", help="JSONL file to write")
    parser.add_argument(
        "--image-template",
        help="str.format template for image names, e.g. "
        "'registry.local/sweb.eval.x86_64.{id_1776}:v1'",
    )


def run(args: argparse.Namespace) -> int:
    src = pathlib.Path(args.input)
    if not src.exists():
        raise UserError(f"input {src} does not exist")
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        rows, skipped = convert_records(
            args.source, src, out.resolve().parent, image_template=args.image_template
        )
    except (ConvertError, OSError, ValueError) as e:
        raise UserError(str(e).splitlines()[0]) from None
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    for reason in skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    print(f"wrote {len(rows)} rows to {out} ({len(skipped)} skipped)")
    return 0 if rows else 1

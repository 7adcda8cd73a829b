"""``coding-agent-rl policy-server``: serve a CPU policy over SGLang's ``/generate``.

Policy specs: ``scripted:FILE`` (a JSON script), ``replay`` (each session's registered gold
patch), ``hf:MODEL_DIR`` (a local transformers causal LM on CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from coding_agent_rl.model.parsers import TOOL_PARSERS
from coding_agent_rl.policy import load_policy
from coding_agent_rl.settings import default

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", required=True, help="scripted:FILE | replay | hf:MODEL_DIR")
    parser.add_argument(
        "--tokenizer", default=default("tokenizer"), help="'qwen3' or a tokenizer directory"
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--tool-parser",
        default=default("tool_parser"),
        choices=sorted(TOOL_PARSERS),
        help="the tool-call format the policy emits",
    )


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError
    from coding_agent_rl.policy.server import PolicyServer

    try:
        policy = load_policy(args.policy)
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from e
    try:
        server = PolicyServer(policy, args.tokenizer, args.tool_parser)
    except (FileNotFoundError, RuntimeError) as e:
        raise UserError(str(e)) from e

    async def serve() -> None:
        url = await server.start(args.host, args.port)
        print(f"policy {policy.name} serving SGLang /generate at {url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    asyncio.run(serve())
    return 0

"""``coding-agent-rl bench NAME ...``: each benchmark is a module ``coding_agent_rl.bench.NAME``.

A benchmark module defines ``add_arguments(parser)`` and ``run(args) -> int``, like a CLI
subcommand; this dispatcher picks it by its first positional argument.
"""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "sandbox": "sandbox create/destroy, exec and completion detection vs the docker CLI",
    "adapter": "incremental vs full prompt rendering on a long agent session",
    "rollout": "end-to-end rollouts on the bundled tasks",
    "grading": "tamper-evident grading vs a plain pytest -rA run of the same tests",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.cli import UserError

    try:
        module = importlib.import_module(f"coding_agent_rl.bench.{args.name}")
    except ModuleNotFoundError as e:
        if e.name == f"coding_agent_rl.bench.{args.name}":
            raise UserError(f"benchmark {args.name!r} is not available yet") from e
        raise
    parser = argparse.ArgumentParser(
        prog=f"coding-agent-rl bench {args.name}", description=BENCHMARKS[args.name]
    )
    module.add_arguments(parser)
    sub_args = parser.parse_args(args.rest)
    sub_args.verbose = getattr(args, "verbose", False)
    return int(module.run(sub_args) or 0)

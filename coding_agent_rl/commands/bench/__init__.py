"""``coding-agent-rl bench NAME ...``: each benchmark is a module ``coding_agent_rl.commands.bench.NAME``.

A benchmark module defines ``add_arguments(parser)`` and ``run(args) -> int``, like a CLI
subcommand; this dispatcher picks it by its first positional argument.

Every benchmark result says what its baseline is (``baseline.kind``: ``run`` — measured in the
same process and run, timed the same way as ours — or ``modelled`` — computed or written for the
benchmark, with ``baseline.from`` / ``baseline.models`` saying what it stands for), lists its
``targets`` and the ``targets_missed`` (every target is checked; an unmeasured figure is a miss).
:func:`report` prints it and gives the exit status: 1 when a target is missed, unless
``--no-check``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import operator
import sys
from collections.abc import Mapping
from typing import Any

# A target: (comparison, bound), e.g. ("<=", 1.1): the figure must be <= 1.1.
Target = tuple[str, float]
_OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, ">": operator.gt}

BENCHMARKS = {
    "sandbox": "sandbox create/destroy, exec and completion detection vs the docker CLI",
    "adapter": "incremental vs full prompt rendering on a long agent session",
    "rollout": "end-to-end rollouts on the bundled tasks",
    "native": "the native loop: per-turn overhead at 32k context, rollouts/min vs Claude Code",
    "grading": "tamper-evident grading vs a plain pytest -rA run of the same tests",
    "multimodal": "per-turn image tensors merged once vs concatenated every turn",
    "branch": "reaching turn k of a rollout by prefix replay vs by sampling (tree rollouts)",
    "bookkeeping": "a finished rollout's bookkeeping at 1k and 10k records vs a re-summary of every record (quadratic)",
    "agents": "agent CPU seconds and wall time per rollout of every agent CLI, replay policy",
    "group": "a GRPO group's sandboxes: one preparation copied n times vs n preparations",
    "admission": "many sandboxes requested at once with admission control on vs off",
    "scale": "the orchestrator's own CPU, memory and loop lag from 16 to 512 rollouts in flight",
    "faults": "a small real batch per fault class, the fault injected: rows lost, duplicates, misattributed, leftovers",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.errors import UserError

    try:
        module = importlib.import_module(f"coding_agent_rl.commands.bench.{args.name}")
    except ModuleNotFoundError as e:
        if e.name == f"coding_agent_rl.commands.bench.{args.name}":
            raise UserError(f"benchmark {args.name!r} is not available yet") from e
        raise
    parser = argparse.ArgumentParser(
        prog=f"coding-agent-rl bench {args.name}", description=BENCHMARKS[args.name]
    )
    module.add_arguments(parser)
    sub_args = parser.parse_args(args.rest)
    sub_args.verbose = getattr(args, "verbose", False)
    return int(module.run(sub_args) or 0)


def add_check_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-check", action="store_true", help="exit 0 even when a target is missed"
    )


def missed_targets(result: Mapping[str, Any], targets: Mapping[str, Target]) -> list[str]:
    """The targets ``result`` misses, as ``"name <= bound (got value)"``. Every target is
    checked: a figure that was not measured (missing or None) is a miss, never a pass."""
    missed = []
    for name, (op, bound) in targets.items():
        value = result.get(name)
        if value is None:
            missed.append(f"{name} {op} {bound:g} (not measured)")
        elif not _OPS[op](value, bound):
            missed.append(f"{name} {op} {bound:g} (got {value})")
    return missed


def target_table(targets: Mapping[str, Target]) -> dict[str, str]:
    """``targets`` as the result prints them: ``{"name": "<= 1.1"}``."""
    return {k: f"{op} {bound:g}" for k, (op, bound) in targets.items()}


def report(name: str, result: dict[str, Any], args: argparse.Namespace) -> int:
    """Print ``result`` (one JSON line with ``--json``, else a table); 1 if it missed a target
    (``result["targets_missed"]``) and ``--no-check`` was not given."""
    if getattr(args, "json", False):
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    missed = result.get("targets_missed") or []
    if missed:
        verdict = "ignored (--no-check)" if args.no_check else "exit 1"
        print(f"bench {name}: target missed: {'; '.join(missed)} [{verdict}]", file=sys.stderr)
        return 0 if args.no_check else 1
    return 0

"""The ``coding-agent-rl`` command: a table of subcommands, each in its own module.

Each module named below defines ``add_arguments(parser)`` and ``run(args) -> int``; it is
imported only when its subcommand runs. User errors exit 2 with one line, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from coding_agent_rl import settings
from coding_agent_rl.errors import TaskDataError, UserError
from coding_agent_rl.registry import Registry

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "images": (
        "coding_agent_rl.commands.images",
        "build the base image or a dataset's task images",
    ),
    "sandboxes": (
        "coding_agent_rl.commands.sandboxes",
        "list or garbage-collect leftover sandboxes",
    ),
    "bench": (
        "coding_agent_rl.commands.bench",
        "benchmarks: sandbox | adapter | rollout | grading | native",
    ),
    "policy-server": (
        "coding_agent_rl.commands.policy_server",
        "serve a CPU policy over SGLang's /generate",
    ),
    "tokenizer": ("coding_agent_rl.commands.tokenizer", "write a tokenizer directory (qwen3)"),
    "agents": ("coding_agent_rl.commands.agents", "fetch agent CLI binaries into the cache"),
    "convert": ("coding_agent_rl.commands.convert", "convert SWE-bench-style datasets"),
    "validate": (
        "coding_agent_rl.commands.validate",
        "validate a dataset with its gold patches",
    ),
    "run": ("coding_agent_rl.commands.run", "run rollouts over a dataset"),
    "demo": ("coding_agent_rl.commands.demo", "the whole pipeline on bundled tasks, no GPU"),
    "audit-grading": (
        "coding_agent_rl.commands.audit_grading",
        "run the attack families against a dataset's tasks through the real pipeline",
    ),
    "view": ("coding_agent_rl.commands.view", "render a run's HTML report"),
    "verify-logprobs": ("coding_agent_rl.commands.verify_logprobs", "recompute logprobs with HF"),
}


def registries() -> list[Registry]:
    """Every registry of named components (each lives with its layer; imported here)."""
    from coding_agent_rl.datasets.convert import CONVERTERS
    from coding_agent_rl.env import ENVIRONMENTS
    from coding_agent_rl.harness import HARNESSES
    from coding_agent_rl.sandbox import BACKENDS

    return [BACKENDS, HARNESSES, ENVIRONMENTS, CONVERTERS]


def broken_entry_points() -> str:
    """Entry points of every registry that fail to load, one line each ('' when none)."""
    lines = [r.describe_failures() for r in registries()]
    return "\n".join(line for line in lines if line)


def build_parser(*, with_failures: bool = False) -> argparse.ArgumentParser:
    """The top-level parser; ``with_failures``: its help lists entry points that fail to load."""
    broken = broken_entry_points() if with_failures else ""
    parser = argparse.ArgumentParser(
        prog="coding-agent-rl",
        description=__doc__.splitlines()[0],
        epilog=f"entry points that failed to load:\n{broken}" if broken else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _dataset_parser(parser: argparse.ArgumentParser, rest: list[str]):
    """The (sub)parser ``rest`` reaches when it has a ``--dataset`` option, else None."""
    if "--dataset" in parser._option_string_actions:
        return parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for i, word in enumerate(rest):
                if word in action.choices:
                    return _dataset_parser(action.choices[word], rest[i + 1 :])
    return None


def positional_dataset(parser: argparse.ArgumentParser, rest: list[str]) -> str | None:
    """A dataset path given without ``--dataset`` (``validate rows.jsonl``), else None."""
    target = _dataset_parser(parser, rest)
    if target is None or any(w == "--dataset" or w.startswith("--dataset=") for w in rest):
        return None
    options = target._option_string_actions
    for prev, word in zip(["", *rest], rest, strict=False):
        takes_value = prev in options and options[prev].nargs != 0
        if word.startswith("-") or takes_value:
            continue
        if word.endswith((".jsonl", ".json", ".parquet")) or os.path.isfile(word):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    asks_help = not argv or argv[0] in ("-h", "--help")
    parser = build_parser(with_failures=asks_help)
    top, rest = parser.parse_known_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if top.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not top.command:
        parser.print_help()
        return 2
    module_name, help_text = COMMANDS[top.command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("coding_agent_rl"):
            print(f"coding-agent-rl: '{top.command}' is not available yet", file=sys.stderr)
            return 2
        raise
    sub = argparse.ArgumentParser(prog=f"coding-agent-rl {top.command}", description=help_text)
    try:
        conf = settings.load()  # the environment, read once for the command
    except UserError as e:
        print(f"coding-agent-rl {top.command}: error: {e}", file=sys.stderr)
        return 2
    try:
        with settings.using(conf):  # flags default to it; the command runs with it
            module.add_arguments(sub)
            if (path := positional_dataset(sub, rest)) is not None:
                print(
                    f"coding-agent-rl {top.command}: error: the dataset is an option: "
                    f"--dataset {path}",
                    file=sys.stderr,
                )
                return 2
            args = sub.parse_args(rest)
            args.verbose = top.verbose
            return int(module.run(args) or 0)
    except (UserError, TaskDataError) as e:  # bad input: one line, no traceback
        print(f"coding-agent-rl {top.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"coding-agent-rl {top.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

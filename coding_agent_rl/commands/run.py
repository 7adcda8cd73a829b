"""``coding-agent-rl run``: rollouts over a dataset, written to an output folder.

Exit status: 0 when the run finished, 2 for a usage error, 3 when *every* rollout failed for an
infrastructure reason (nothing was graded: a broken image, an unreachable policy server, ...);
the message names the failing component and the first reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.errors import UserError
from coding_agent_rl.sandbox import BACKENDS

NETWORK_MODES = ("adapter-only", "open", "none")


# flag dest -> the setting it defaults to (tests/commands/test_run_defaults.py checks each).
SETTING_FLAGS: dict[str, str] = {
    "agent": "agent",
    "sandbox": "sandbox",
    "tokenizer": "tokenizer",
    "executor": "executor",
    "ray_address": "ray_address",
    "resume_attempts": "resume_attempts",
    "tool_parser": "tool_parser",
    "reasoning_parser": "reasoning_parser",
    "agent_budget": "agent_budget_s",
    "eval_timeout": "eval_timeout_s",
    "rollout_deadline": "rollout_deadline_s",
    "reward_mode": "reward_mode",
    "tamper_policy": "tamper_policy",
    "twin_grade": "twin_grade",
    "tamper_reward": "tamper_reward",
    "agent_network": "agent_network",
    "model_name": "model_name",
    "pool_size": "pool_size",
    "fork": "fork_groups",
}


def setting_defaults(conf: settings.Settings) -> dict[str, object]:
    """The defaults of the flags in :data:`SETTING_FLAGS`: their settings' values."""
    out: dict[str, object] = {dest: getattr(conf, name) for dest, name in SETTING_FLAGS.items()}
    out["reasoning_parser"] = out["reasoning_parser"] or "none"
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags; those in :data:`SETTING_FLAGS` default to the installed settings (so a flag
    and its ``CODING_AGENT_RL_*`` variable mean the same thing)."""
    p.add_argument("--dataset", required=True, help="JSONL of task rows")
    p.add_argument(
        "--agent",
        help="harness name (claude_code, codex, ...), or 'native': the policy's own tool calls "
        "run by the coding environment, no agent CLI (default %(default)s)",
    )
    p.add_argument("--sandbox", choices=BACKENDS.names(), help="default %(default)s")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sglang-url", help="a served policy (SGLang server or router)")
    src.add_argument("--policy", help="a CPU policy: replay | scripted:FILE | hf:DIR")
    p.add_argument(
        "--tokenizer",
        help="HF tokenizer dir, or 'qwen3' (built offline; default %(default)s)",
    )
    p.add_argument("--out", required=True, type=pathlib.Path)
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="rollouts at a time (default 4; with --executor ray: every free slot of the cluster)",
    )
    p.add_argument(
        "--executor",
        help="where rollouts run: in-process (default %(default)s) or ray (a worker per node "
        "of a Ray cluster advertising coding_agent_rl_slots)",
    )
    p.add_argument(
        "--ray-address",
        help="with --executor ray: the cluster, HOST:PORT or auto",
    )
    p.add_argument("--n-samples", type=int, default=1, help="rollouts per task (one GRPO group)")
    p.add_argument("--limit", type=int, help="only the first N tasks")
    # -- tree rollouts (rollout/branch.py) --
    p.add_argument(
        "--branches",
        type=int,
        default=None,
        metavar="B",
        help="grow each rollout into a tree: B branches replaying its first turns in fresh "
        "sandboxes, then sampling anew (default with --branch-at: 1)",
    )
    p.add_argument(
        "--branch-at",
        type=int,
        default=None,
        metavar="K",
        help="with --branches: branch at turn K (K turns replayed); default: at the B turns "
        "where the policy was least sure (mean negative logprob of the sampled tokens)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip rollouts already in OUT; re-run those whose latest record is an "
        "infrastructure failure (up to --resume-attempts records per rollout)",
    )
    p.add_argument(
        "--resume-attempts",
        type=int,
        metavar="N",
        help="with --resume: attempts per rollout in all (default %(default)s)",
    )
    p.add_argument(
        "--tool-parser",
        help="qwen25 | hermes | qwen3_coder (default %(default)s)",
    )
    p.add_argument(
        "--reasoning-parser",
        help="qwen3 | none (default %(default)s)",
    )
    p.add_argument(
        "--agent-budget",
        type=float,
        help="seconds per agent run (default %(default)s)",
    )
    p.add_argument(
        "--eval-timeout",
        type=float,
        help="seconds for the tests (default %(default)s)",
    )
    p.add_argument(
        "--rollout-deadline",
        type=float,
        metavar="S",
        help="whole-rollout guard, seconds (default: agent budget + 2 x eval timeout + 600)",
    )
    p.add_argument(
        "--model-name",
        help="the model name the agent CLI is told to use (default %(default)s)",
    )
    p.add_argument("--max-context", type=int, default=32768, help="tokens per sample")
    p.add_argument("--max-new-tokens", type=int, default=4096)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--reward-mode", choices=("full", "split"))
    p.add_argument(
        "--max-turns", type=int, help="model turns per rollout (native default: 50; CLIs: no cap)"
    )
    p.add_argument(
        "--native-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="native agent option, e.g. on_no_tool_call=nudge, max_response=8192, "
        "bash_timeout_s=60 (repeatable; see rollout/native.py NativeOptions)",
    )
    p.add_argument(
        "--tamper-policy",
        choices=("zero", "flag"),
        help="static tamper screen findings: zero the reward or only record them "
        "(default %(default)s)",
    )
    p.add_argument(
        "--twin-grade",
        action=argparse.BooleanOptionalAction,
        help="grade every diff twice in fresh sandboxes with independent blinding and canaries; "
        "hidden-test outcomes that disagree are tampering (recommended for evaluation)",
    )
    p.add_argument(
        "--tamper-reward",
        type=float,
        metavar="R",
        help="reward of a result with tampering evidence (default %(default)s; -1 makes a forging "
        "strategy's expected reward negative)",
    )
    p.add_argument(
        "--vision",
        metavar="DIR",
        help="a VLM checkpoint whose image processor expands pictures (default: the hf: policy's "
        "directory when it is a VLM); without one pictures reach the policy as placeholder text",
    )
    p.add_argument(
        "--picture-option",
        "--image-option",
        dest="picture_option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pictures in prompts: max_bytes, max_pixels, max_per_turn, max_per_sample, "
        "text_only=placeholder|refuse, placeholder=TEXT (repeatable; multimodal/parts.py)",
    )
    p.add_argument(
        "--sandbox-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="backend option, e.g. memory=8g, cpus=4, pids=2048, disk=20g, nofile=8192 "
        "(limits; null turns one off), runtime=runsc (repeatable; on top of "
        "$CODING_AGENT_RL_SANDBOX_OPTIONS)",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        metavar="N",
        help="agent sandboxes prepared ahead for the rollouts coming next; 0: none (default: "
        "$CODING_AGENT_RL_POOL_SIZE, else one per rollout slot: --concurrency, or each Ray "
        "node's slots; docs/sandbox-pool.md)",
    )
    p.add_argument(
        "--fork",
        action=argparse.BooleanOptionalAction,
        help="prepare each task once per group (--n-samples) and copy it for every sample "
        "(default: $CODING_AGENT_RL_FORK_GROUPS, off)",
    )
    p.add_argument(
        "--agent-network",
        choices=NETWORK_MODES,
        help="what the agent sandbox can reach: adapter-only (the default), open (the "
        "backend's network) or none",
    )
    p.set_defaults(**setting_defaults(settings.current()))


def parse_options(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--sandbox-option {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def build_config(args: argparse.Namespace):
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    if (args.concurrency is not None and args.concurrency < 1) or args.n_samples < 1:
        raise UserError("--concurrency and --n-samples must be >= 1")
    if args.pool_size is not None and args.pool_size < 0:
        raise UserError("--pool-size must be >= 0")
    if args.max_turns is not None and args.max_turns < 1:
        raise UserError("--max-turns must be >= 1")
    native = native_options(args)
    if args.policy and not (
        args.policy == "replay" or args.policy.startswith(("scripted:", "hf:"))
    ):
        raise UserError(f"--policy {args.policy!r}: expected replay, scripted:FILE or hf:DIR")
    conf = settings.current()
    return RuntimeConfig(
        agent=args.agent,
        sglang_url=args.sglang_url,
        policy=args.policy,
        tokenizer=args.tokenizer,
        tool_parser=args.tool_parser,
        reasoning_parser=None if args.reasoning_parser == "none" else args.reasoning_parser,
        sampling_defaults={"max_new_tokens": args.max_new_tokens, "temperature": args.temperature},
        harness_options=native,
        vision=args.vision,
        images=picture_settings(args.picture_option),
        rollout=RolloutConfig.from_settings(
            conf,
            backend=args.sandbox,
            sandbox_options={**conf.sandbox_options, **parse_options(args.sandbox_option)},
            agent_budget_s=args.agent_budget,
            eval_timeout_s=args.eval_timeout,
            deadline_s=args.rollout_deadline,
            model_name=args.model_name,
            max_context=args.max_context,
            reward_mode=args.reward_mode,
            max_turns=args.max_turns,
            out_dir=args.out,
            tamper_policy=args.tamper_policy,
            twin_grade=args.twin_grade,
            tamper_reward=args.tamper_reward,
            agent_network=args.agent_network,
            pool_size=pool_size(args),
            fork_groups=args.fork,
            group_size=args.n_samples,
        ),
    )


def picture_settings(items: list[str]):
    """``--picture-option`` values as :class:`ImageSettings` (limits and text-only policy)."""
    import dataclasses

    from coding_agent_rl.multimodal.parts import ImageSettings
    from coding_agent_rl.multimodal.pictures import ImageLimits

    options: dict[str, Any] = parse_options(items)
    limits = {f.name for f in dataclasses.fields(ImageLimits)}
    top = {"text_only", "placeholder"}
    unknown = sorted(set(options) - limits - top)
    if unknown:
        raise UserError(
            f"--picture-option {unknown[0]}: unknown (one of {', '.join(sorted(limits | top))})"
        )
    try:
        return ImageSettings(
            limits=ImageLimits(**{k: v for k, v in options.items() if k in limits}),
            **{k: str(v) for k, v in options.items() if k in top},
        )
    except (TypeError, ValueError) as e:
        raise UserError(f"--picture-option: {e}") from e


def native_options(args: argparse.Namespace) -> dict[str, object]:
    """``--native-option`` values, checked against the native agent's settings."""
    import dataclasses

    from coding_agent_rl.rollout.native import NATIVE, NativeOptions

    options = parse_options(getattr(args, "native_option", None) or [])
    if options and args.agent != NATIVE:
        raise UserError("--native-option applies to --agent native only")
    known = {f.name for f in dataclasses.fields(NativeOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UserError(
            f"unknown --native-option {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    try:
        NativeOptions(**options)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise UserError(f"--native-option: {e}") from e
    return options


def check_isolation(rollout) -> None:
    """The agent network and the sandbox options, checked before anything starts: one line
    naming the problem (e.g. adapter-only egress that this backend cannot enforce here)."""
    from coding_agent_rl.rollout.isolation import AgentNetwork
    from coding_agent_rl.sandbox import create_sandbox

    try:
        network = AgentNetwork(rollout.agent_network, rollout.backend)
        opts = {**rollout.sandbox_options, **network.options()}
        create_sandbox(rollout.backend, "check", **opts)  # validates options, starts nothing
    except ValueError as e:
        raise UserError(f"{e}") from None


def load_rows(path: str, limit: int | None) -> list:
    from coding_agent_rl.datasets.schema import DatasetError, load_dataset

    try:
        rows = load_dataset(path)
    except DatasetError as e:
        raise UserError(str(e)) from e
    return rows[:limit] if limit else rows


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.harness import HARNESSES
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.native import NATIVE
    from coding_agent_rl.rollout.outputs import RunWriter

    if args.agent not in (*HARNESSES.names(), NATIVE):
        known = ", ".join([*HARNESSES.names(), NATIVE])
        raise UserError(f"unknown agent {args.agent!r}; known: {known}")
    rows = load_rows(args.dataset, args.limit)
    config = build_config(args)
    check_isolation(config.rollout)
    attempts = args.resume_attempts
    if attempts < 1:
        raise UserError("--resume-attempts must be >= 1")
    executor, concurrency = executor_choice(args)
    tree = tree_spec(args, executor)
    writer = RunWriter(args.out, resume=args.resume, resume_attempts=attempts)
    with settings.using(settings.current().model_copy(update=executor_settings(args))):
        if tree is not None:  # tree rollouts (rollout/branch.py)
            from coding_agent_rl.rollout.branch import run_trees

            coro = run_trees(
                rows,
                config,
                writer,
                tree,
                concurrency=concurrency or DEFAULT_CONCURRENCY,
                n_samples=args.n_samples,
                info={"dataset": str(args.dataset)},
            )
        else:
            coro = run_batch(
                rows,
                config,
                writer,
                concurrency=concurrency,
                n_samples=args.n_samples,
                info={"dataset": str(args.dataset)},
                executor=executor,
            )
        summary = asyncio.run(coro)
    keys = (
        "total",
        "graded",
        "solved",
        "mean_reward",
        "infra_failures",
        "failures_by_kind",
        "tampering",
        "tampering_by_kind",
    )
    print(json.dumps({k: summary[k] for k in keys}))
    return all_infra_exit(summary)


def tree_spec(args: argparse.Namespace, executor: str):
    """``--branches`` / ``--branch-at`` as a :class:`TreeSpec` (None: plain rollouts)."""
    from coding_agent_rl.rollout.branch import TreeSpec

    branches, at = getattr(args, "branches", None), getattr(args, "branch_at", None)
    if branches is None and at is None:
        return None
    branches = 1 if branches is None else branches
    if branches < 1 or (at is not None and at < 1):
        raise UserError("--branches and --branch-at must be >= 1")
    if args.agent == "native":
        raise UserError("--branches: tree rollouts replay an agent CLI's turns; not with native")
    if executor != "in-process" or args.resume:
        raise UserError("--branches runs in-process and without --resume")
    return TreeSpec(branches=branches, branch_at=at)


def pool_size(args: argparse.Namespace) -> int | None:
    """``--pool-size``, else one prepared sandbox per rollout slot: the concurrency in process;
    None on Ray (each node's worker keeps its own slots' worth)."""
    if args.pool_size is not None:
        return int(args.pool_size)
    name, concurrency = executor_choice(args)
    return concurrency if name == "in-process" else None


def executor_choice(args: argparse.Namespace) -> tuple[str, int | None]:
    """The executor's name (``--executor``, else the setting) and its concurrency cap."""
    from coding_agent_rl.rollout.executor import EXECUTORS

    conf = settings.current()
    name = getattr(args, "executor", None) or conf.executor
    if name not in EXECUTORS.names():
        raise UserError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS.names())}")
    address = getattr(args, "ray_address", None)
    if address and address != conf.ray_address and name != "ray":  # Ray's own RAY_ADDRESS is fine
        raise UserError("--ray-address applies to --executor ray only")
    concurrency = args.concurrency
    if concurrency is None and name == "in-process":
        concurrency = DEFAULT_CONCURRENCY
    return name, concurrency


def executor_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings ``--executor`` / ``--ray-address`` override."""
    update: dict[str, Any] = {}
    if getattr(args, "executor", None):
        update["executor"] = args.executor
    if getattr(args, "ray_address", None):
        update["ray_address"] = args.ray_address
    return update


DEFAULT_CONCURRENCY = 4
ALL_INFRA_EXIT = 3


def all_infra_exit(summary: dict) -> int:
    """3 (with a message on stderr) when every rollout failed for infrastructure reasons."""
    total, infra = summary["total"], summary["infra_failures"]
    if not total or infra < total:
        return 0
    stages = ", ".join(f"{k}: {v}" for k, v in sorted(summary["infra_by_stage"].items()))
    print(
        f"coding-agent-rl run: every rollout ({total}) failed for infrastructure reasons "
        f"({stages}); nothing was graded. First: {summary['first_infra_reason']}",
        file=sys.stderr,
    )
    return ALL_INFRA_EXIT

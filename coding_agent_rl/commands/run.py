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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="JSONL of task rows")
    p.add_argument(
        "--agent",
        default="claude_code",
        help="harness name (claude_code, codex, ...), or 'native': the policy's own tool calls "
        "run by the coding environment, no agent CLI",
    )
    p.add_argument("--sandbox", default="docker", choices=BACKENDS.names())
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--sglang-url", help="a served policy (SGLang server or router)")
    src.add_argument("--policy", help="a CPU policy: replay | scripted:FILE | hf:DIR")
    p.add_argument(
        "--tokenizer", default="qwen3", help="HF tokenizer dir, or 'qwen3' (built offline)"
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
        default=None,
        help="where rollouts run: in-process (default; $CODING_AGENT_RL_EXECUTOR) or ray (a "
        "worker per node of a Ray cluster advertising coding_agent_rl_slots)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="with --executor ray: the cluster, HOST:PORT or auto ($CODING_AGENT_RL_RAY_ADDRESS)",
    )
    p.add_argument("--n-samples", type=int, default=1, help="rollouts per task (one GRPO group)")
    p.add_argument("--limit", type=int, help="only the first N tasks")
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip rollouts already in OUT; re-run those whose latest record is an "
        "infrastructure failure (up to --resume-attempts records per rollout)",
    )
    p.add_argument(
        "--resume-attempts",
        type=int,
        default=None,
        metavar="N",
        help="with --resume: attempts per rollout in all (default: $CODING_AGENT_RL_RESUME_ATTEMPTS, 2)",
    )
    p.add_argument("--tool-parser", default="qwen25", help="qwen25 | hermes | qwen3_coder")
    p.add_argument("--reasoning-parser", default="qwen3", help="qwen3 | none")
    p.add_argument("--agent-budget", type=float, default=1800.0, help="seconds per agent run")
    p.add_argument("--eval-timeout", type=float, default=600.0, help="seconds for the tests")
    p.add_argument("--max-context", type=int, default=32768, help="tokens per sample")
    p.add_argument("--max-new-tokens", type=int, default=4096)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--reward-mode", choices=("full", "split"), default="full")
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
        default="zero",
        help="static tamper screen findings: zero the reward (default) or only record them",
    )
    p.add_argument(
        "--twin-grade",
        action="store_true",
        help="grade every diff twice in fresh sandboxes with independent blinding and canaries; "
        "hidden-test outcomes that disagree are tampering (recommended for evaluation)",
    )
    p.add_argument(
        "--tamper-reward",
        type=float,
        default=0.0,
        metavar="R",
        help="reward of a result with tampering evidence (default 0; -1 makes a forging "
        "strategy's expected reward negative)",
    )
    p.add_argument(
        "--vision",
        metavar="DIR",
        help="a VLM checkpoint whose image processor expands images (default: the hf: policy's "
        "directory when it is a VLM); without one images reach the policy as placeholder text",
    )
    p.add_argument(
        "--image-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="image setting: max_bytes, max_pixels, max_per_turn, max_per_sample, "
        "text_only=placeholder|refuse, placeholder=TEXT (repeatable; multimodal/parts.py)",
    )
    p.add_argument(
        "--sandbox-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="backend option, e.g. memory=8g, cpus=4, pids=2048, disk=20g, nofile=8192 "
        "(limits; null turns one off), runtime=runsc (repeatable)",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        default=None,
        metavar="N",
        help="agent sandboxes prepared ahead for the rollouts coming next (default: "
        "$CODING_AGENT_RL_POOL_SIZE, 0; docs/sandbox-pool.md says how to size it)",
    )
    p.add_argument(
        "--fork",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="prepare each task once per group (--n-samples) and copy it for every sample "
        "(default: $CODING_AGENT_RL_FORK_GROUPS, off)",
    )
    p.add_argument(
        "--agent-network",
        choices=NETWORK_MODES,
        default=None,
        help="what the agent sandbox can reach: adapter-only (default; "
        "$CODING_AGENT_RL_AGENT_NETWORK), open (the backend's network) or none",
    )


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
        images=image_settings(args.image_option),
        rollout=RolloutConfig(
            backend=args.sandbox,
            sandbox_options=parse_options(args.sandbox_option),
            agent_budget_s=args.agent_budget,
            eval_timeout_s=args.eval_timeout,
            max_context=args.max_context,
            reward_mode=args.reward_mode,
            max_turns=args.max_turns,
            out_dir=args.out,
            tamper_policy=args.tamper_policy,
            twin_grade=args.twin_grade,
            tamper_reward=args.tamper_reward,
            agent_network=args.agent_network,
            pool_size=args.pool_size,
            fork_groups=args.fork,
            group_size=args.n_samples,
        ),
    )


def image_settings(items: list[str]):
    """``--image-option`` values as :class:`ImageSettings` (limits and text-only policy)."""
    import dataclasses

    from coding_agent_rl.multimodal.images import ImageLimits
    from coding_agent_rl.multimodal.parts import ImageSettings

    options: dict[str, Any] = parse_options(items)
    limits = {f.name for f in dataclasses.fields(ImageLimits)}
    top = {"text_only", "placeholder"}
    unknown = sorted(set(options) - limits - top)
    if unknown:
        raise UserError(
            f"--image-option {unknown[0]}: unknown (one of {', '.join(sorted(limits | top))})"
        )
    try:
        return ImageSettings(
            limits=ImageLimits(**{k: v for k, v in options.items() if k in limits}),
            **{k: str(v) for k, v in options.items() if k in top},
        )
    except (TypeError, ValueError) as e:
        raise UserError(f"--image-option: {e}") from e


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
    if attempts is None:
        attempts = settings.current().resume_attempts
    elif attempts < 1:
        raise UserError("--resume-attempts must be >= 1")
    executor, concurrency = executor_choice(args)
    writer = RunWriter(args.out, resume=args.resume, resume_attempts=attempts)
    with settings.using(settings.current().model_copy(update=executor_settings(args))):
        summary = asyncio.run(
            run_batch(
                rows,
                config,
                writer,
                concurrency=concurrency,
                n_samples=args.n_samples,
                info={"dataset": str(args.dataset)},
                executor=executor,
            )
        )
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


def executor_choice(args: argparse.Namespace) -> tuple[str, int | None]:
    """The executor's name (``--executor``, else the setting) and its concurrency cap."""
    from coding_agent_rl.rollout.executor import EXECUTORS

    name = getattr(args, "executor", None) or settings.current().executor
    if name not in EXECUTORS.names():
        raise UserError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS.names())}")
    if getattr(args, "ray_address", None) and name != "ray":
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

"""``coding-agent-rl demo``: the whole pipeline on the bundled example tasks, no GPU.

Builds what it needs (base image, task images, agent binary cache), then runs the real agent
CLI in Docker against three CPU policies: ``replay`` (applies each task's gold patch through
the agent's shell tool: should solve everything), ``give-up`` (answers without touching the
code: reward 0) and ``rewrite-tests`` (guts the visible tests and plants a conftest that forces
PASSED: the grader must still score 0). Writes one HTML report per policy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import pathlib
import subprocess
import time
from importlib import resources
from typing import Any

from coding_agent_rl.errors import UserError

GIVE_UP = {"steps": [{"say": "I looked at the repository but I cannot solve this task."}]}
# What reward hackers do: make the visible tests vacuous and force every test to pass.
REWRITE_TESTS = {
    "steps": [
        {
            "shell": (
                "for f in $(git ls-files 'tests/*.py' 'test_*.py'); do "
                "printf 'def test_ok():\\n    assert True\\n' > \"$f\"; done; "
                "printf 'import pytest\\n\\n@pytest.hookimpl(hookwrapper=True)\\n"
                "def pytest_runtest_makereport(item, call):\\n    outcome = yield\\n"
                '    rep = outcome.get_result()\\n    rep.outcome = "passed"\\n\' > conftest.py'
            )
        },
        {"say": "All tests pass now."},
    ]
}


def examples_dataset() -> pathlib.Path:
    return pathlib.Path(
        str(resources.files("coding_agent_rl.datasets") / "examples" / "tasks.jsonl")
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/demo"))
    p.add_argument("--agent", default="claude_code", help="claude_code | codex | ...")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--agent-budget", type=float, default=300.0)
    p.add_argument(
        "--skip-adversaries",
        action="store_true",
        help="only the replay policy (no give-up / rewrite-tests runs)",
    )


def prepare(agent: str) -> list[Any]:
    """Base image, task images, agent binary: built once, reused on later runs."""
    from coding_agent_rl.commands.run import load_rows
    from coding_agent_rl.datasets.images import build_dataset_images
    from coding_agent_rl.harness import HARNESSES
    from coding_agent_rl.harness.cache import fetch
    from coding_agent_rl.sandbox.images import build_base_image

    t = time.monotonic()
    build_base_image()
    images = build_dataset_images(examples_dataset())
    fetch(HARNESSES.load(agent).package)
    print(
        f"  prepared base image, {len(images)} task images, {agent} binary "
        f"({time.monotonic() - t:.1f}s)",
        flush=True,
    )
    return load_rows(str(examples_dataset()), None)


def run_policy(name: str, policy: str, rows: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.runner import RolloutConfig
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    out = args.out / name
    config = RuntimeConfig(
        agent=args.agent,
        policy=policy,
        sampling_defaults={"max_new_tokens": 2048},
        rollout=RolloutConfig(
            backend="docker",
            agent_budget_s=args.agent_budget,
            eval_timeout_s=120,
            max_context=32768,
            out_dir=out,
        ),
    )
    print(f"\n== policy {name}: {len(rows)} rollouts with {args.agent} in Docker", flush=True)
    summary = asyncio.run(
        run_batch(
            rows,
            config,
            RunWriter(out),
            concurrency=args.concurrency,
            info={"dataset": "bundled examples", "run_id": f"demo-{name}"},
        )
    )
    from coding_agent_rl.report.html import render_report

    summary["report"] = str(render_report(out, out / "report.html"))
    return summary


def table(results: dict[str, dict[str, Any]]) -> str:
    head = f"{'policy':<15}{'rollouts':>9}{'solved':>8}{'reward':>8}{'failures':>18}{'p50 s':>8}"
    lines = [head, "-" * len(head)]
    for name, s in results.items():
        fails = ",".join(f"{k}={v}" for k, v in sorted(s["failures_by_kind"].items())) or "-"
        lines.append(
            f"{name:<15}{s['total']:>9}{s['solved']:>8}{s['mean_reward']:>8.2f}{fails:>18}"
            f"{s['timings_p50'].get('total_s', 0):>8.1f}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        raise UserError("no Docker engine answers; run scripts/ensure-docker.sh (as root) first")
    if not args.verbose:  # progress lines and the table; per-event logs with -v
        for name in ("rollout.runner", "rollout.runtime", "harness", "sandbox", "datasets"):
            logging.getLogger(f"coding_agent_rl.{name}").setLevel(logging.WARNING)
    t0 = time.monotonic()
    print("coding-agent-rl demo: real agent CLI + Docker sandboxes + CPU policies", flush=True)
    rows = prepare(args.agent)
    args.out.mkdir(parents=True, exist_ok=True)
    policies = {"replay": "replay"}
    if not args.skip_adversaries:
        for name, script in (("give-up", GIVE_UP), ("rewrite-tests", REWRITE_TESTS)):
            path = args.out / f"{name}.json"
            path.write_text(json.dumps(script, indent=1))
            policies[name] = f"scripted:{path}"
    results = {name: run_policy(name, spec, rows, args) for name, spec in policies.items()}
    print("\n" + table(results))
    for name, s in results.items():
        print(f"report ({name}): {s['report']}")
    print(
        f"\ndone in {time.monotonic() - t0:.0f}s. Point it at a real policy with:\n"
        f"  coding-agent-rl run --dataset {examples_dataset()} --agent {args.agent} \\\n"
        "    --sglang-url http://HOST:30000 --tokenizer /path/to/hf_checkpoint --out runs/real"
    )
    return 0

"""``coding-agent-rl demo``: the whole pipeline on the bundled example tasks, no GPU.

Builds what it needs (base image, task images, agent binary cache), then runs the real agent
CLI in Docker sandboxes, or in local bubblewrap ones where no engine answers (images are then
root filesystems built with debootstrap, see ``images/rootfs.py``), against three CPU policies: ``replay`` (applies each task's gold patch through
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
import shutil
import subprocess
import time
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.datasets import examples_dataset
from coding_agent_rl.errors import UserError
from coding_agent_rl.policy import attacks
from coding_agent_rl.sandbox import BACKENDS

GIVE_UP = {"steps": [{"say": "I looked at the repository but I cannot solve this task."}]}
# What reward hackers do: make the visible tests vacuous and force every test to pass.
REWRITE_TESTS = {"steps": attacks.REWRITE_TESTS}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/demo"))
    p.add_argument("--agent", default="claude_code", help="claude_code | codex | ...")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--agent-budget", type=float, default=300.0)
    p.add_argument(
        "--sandbox",
        choices=("auto", *BACKENDS.names()),
        default="auto",
        help="auto: Docker when an engine answers, else local (bubblewrap, as root)",
    )
    p.add_argument("--limit", type=int, help="only the first N example tasks")
    p.add_argument(
        "--skip-adversaries",
        action="store_true",
        help="only the replay policy (no give-up / rewrite-tests runs)",
    )


def docker_reason() -> str | None:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    r = subprocess.run(["docker", "info"], capture_output=True, text=True)
    return None if r.returncode == 0 else "no Docker engine answers (scripts/ensure-docker.sh)"


def pick_sandbox(wanted: str) -> str:
    """``docker`` or ``local`` for ``--sandbox wanted``; a UserError when it cannot run here."""
    from coding_agent_rl.sandbox.local import bwrap_reason

    docker = docker_reason() if wanted in ("auto", "docker") else None
    if wanted == "docker" or (wanted == "auto" and docker is None):
        if docker:
            raise UserError(f"--sandbox docker: {docker}")
        return "docker"
    if wanted not in ("auto", "local"):
        return wanted  # another registered backend, as asked
    local = bwrap_reason()
    if local is None:
        return "local"
    if wanted == "local":
        raise UserError(f"--sandbox local: {local}")
    raise UserError(f"no sandbox backend works here: Docker: {docker}; local: {local}")


def prepare(agent: str, backend: str, limit: int | None = None) -> list[Any]:
    """Base image, task images, agent binary: built once, reused on later runs."""
    from coding_agent_rl.commands.run import load_rows
    from coding_agent_rl.harness import HARNESSES, pyvenv
    from coding_agent_rl.harness.cache import fetch
    from coding_agent_rl.images import rootfs
    from coding_agent_rl.images.base import build_base_image
    from coding_agent_rl.images.dataset import build_dataset_images

    t = time.monotonic()
    kind = BACKENDS.load(backend).image_kind
    if kind == "docker":
        build_base_image()
    elif kind == "rootfs" and rootfs.find(rootfs.BASE_IMAGE) is None:
        print("  building the base root filesystem with debootstrap (once, ~2 min)", flush=True)
        rootfs.build_base()
    images = build_dataset_images(examples_dataset(), kind=kind) if kind else []
    harness = HARNESSES.load(agent)
    for pkg in harness.packages():
        fetch(pkg)
    if harness.python is not None:  # a PyPI CLI: its wheel set, installed in the host cache
        pyvenv.build(harness.python)
    what = "image" if kind == "docker" else "root filesystem"
    print(
        f"  prepared base {what}, {len(images)} task {what}s, {agent} binary "
        f"({time.monotonic() - t:.1f}s)",
        flush=True,
    )
    return load_rows(str(examples_dataset()), limit)


def run_policy(
    name: str, policy: str, rows: list[Any], args: argparse.Namespace, backend: str
) -> dict[str, Any]:
    from coding_agent_rl.rollout.batch import run_batch
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    out = args.out / name
    pool = settings.current().pool_size  # unset: as `run`, one prepared sandbox per slot
    config = RuntimeConfig(
        agent=args.agent,
        policy=policy,
        sampling_defaults={"max_new_tokens": 2048},
        rollout=RolloutConfig(
            backend=backend,
            agent_budget_s=args.agent_budget,
            eval_timeout_s=120,
            max_context=32768,
            out_dir=out,
            pool_size=args.concurrency if pool is None else pool,
        ),
    )
    where = "Docker" if backend == "docker" else "local bubblewrap sandboxes"
    print(f"\n== policy {name}: {len(rows)} rollouts with {args.agent} in {where}", flush=True)
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
        reward = "-" if s["mean_reward"] is None else f"{s['mean_reward']:.2f}"
        lines.append(
            f"{name:<15}{s['total']:>9}{s['solved']:>8}{reward:>8}{fails:>18}"
            f"{s['timings_p50'].get('total_s', 0):>8.1f}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    backend = pick_sandbox(args.sandbox)
    if not args.verbose:  # progress lines and the table; per-event logs with -v
        for name in ("rollout.runner", "rollout.runtime", "harness", "sandbox", "datasets"):
            logging.getLogger(f"coding_agent_rl.{name}").setLevel(logging.WARNING)
    t0 = time.monotonic()
    where = "Docker" if backend == "docker" else "local (bubblewrap)"
    print(f"coding-agent-rl demo: real agent CLI + {where} sandboxes + CPU policies", flush=True)
    rows = prepare(args.agent, backend, args.limit)
    args.out.mkdir(parents=True, exist_ok=True)
    policies = {"replay": "replay"}
    if not args.skip_adversaries:
        for name, script in (("give-up", GIVE_UP), ("rewrite-tests", REWRITE_TESTS)):
            path = args.out / f"{name}.json"
            path.write_text(json.dumps(script, indent=1))
            policies[name] = f"scripted:{path}"
    results = {name: run_policy(name, spec, rows, args, backend) for name, spec in policies.items()}
    print("\n" + table(results))
    for name, s in results.items():
        print(f"report ({name}): {s['report']}")
    print(
        f"\ndone in {time.monotonic() - t0:.0f}s. Point it at a real policy with:\n"
        f"  coding-agent-rl run --dataset {examples_dataset()} --agent {args.agent} "
        f"--sandbox {backend} \\\n"
        "    --sglang-url http://HOST:30000 --tokenizer /path/to/hf_checkpoint --out runs/real"
    )
    return 0

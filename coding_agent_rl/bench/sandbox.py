"""``coding-agent-rl bench sandbox``: our sandbox layer against the docker CLI, same run.

Three figures, each the median of ``--n`` samples, ours and the CLI's interleaved so load drift
on a shared machine hits both alike:

- exec: ``sb.exec("true")`` vs ``docker exec CID true`` on the same container;
- lifecycle: create+destroy through ``create_sandbox`` vs ``docker run -d`` + ``docker rm -f``
  of the same image with the same init/entrypoint;
- completion detection: a detached command (``sandbox.detach``) records the wall clock as its
  last act; we measure until ``wait_detached`` returns (the container shares the host's clock).

Targets: exec <= 1.1x the CLI, lifecycle <= 1.2x, exit noticed within 200 ms. The baseline
(docker backend) is run in this process, interleaved with ours; the ``local`` backend has none,
and completion detection has no run baseline (slime polls its marker every 5 s: a design figure,
not measured here).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.bench import add_check_argument, missed_targets, report
from coding_agent_rl.sandbox import create_sandbox
from coding_agent_rl.sandbox.detach import start_detached, wait_detached

TARGETS = {
    "exec_ratio": ("<=", 1.1),
    "lifecycle_ratio": ("<=", 1.2),
    "completion_detect_ms_p50": ("<=", 200.0),
}


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


async def _cli(*argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.decode().strip()}")
    return out.decode().strip()


async def _pair(
    n: int, ours: Callable[[], Awaitable[Any]], cli: Callable[[], Awaitable[Any]] | None
) -> tuple[list[float], list[float]]:
    """``n`` timings of each, alternating which goes first."""
    a: list[float] = []
    b: list[float] = []
    for i in range(n):
        order = [(ours, a), (cli, b)] if i % 2 == 0 else [(cli, b), (ours, a)]
        for fn, sink in order:
            if fn is not None:
                sink.append(await _timed(fn))
    return a, b


def _p50(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


async def bench(backend: str, image: str, n: int, poll_s: float) -> dict[str, Any]:
    docker = backend == "docker"
    options: dict[str, Any] = {}

    async def lifecycle() -> None:
        async with create_sandbox(backend, image, **options):
            pass

    async def cli_lifecycle() -> None:
        cid = await _cli(
            "docker",
            "run",
            "-d",
            "--init",
            "--label",
            "coding-agent-rl.sandbox=1",
            "--entrypoint",
            "sleep",
            image,
            "infinity",
        )
        await _cli("docker", "rm", "-f", "-v", cid)

    await lifecycle()  # warm-up (image cache, client, thread pool)
    life, cli_life = await _pair(n, lifecycle, cli_lifecycle if docker else None)

    async with create_sandbox(backend, image, **options) as sb:
        cid = getattr(sb, "container_id", None)
        for _ in range(3):
            await sb.exec("true")
        ex, cli_ex = await _pair(
            n,
            lambda: sb.exec("true"),
            (lambda: _cli("docker", "exec", cid, "true")) if docker else None,
        )
        detect = []
        for i in range(n):
            marker, stamp = f"/tmp/bench-done-{i}", f"/tmp/bench-exit-{i}"
            # The last act of the command is recording the time; then it exits.
            await start_detached(sb, f"sleep 0.3; date +%s.%N > {stamp}", marker=marker)
            code = await wait_detached(sb, marker, timeout=30, poll_s=poll_s)
            noticed = time.time()
            if code != 0:
                raise RuntimeError(f"detached bench command failed (exit {code})")
            exited = float(await sb.read_file(stamp))
            detect.append((noticed - exited) * 1000)

    result: dict[str, Any] = {
        "backend": backend,
        "image": image,
        "n": n,
        "poll_s": poll_s,
        "exec_ms_p50": _p50(ex),
        "cli_exec_ms_p50": _p50(cli_ex),
        "lifecycle_ms_p50": _p50(life),
        "cli_lifecycle_ms_p50": _p50(cli_life),
        "completion_detect_ms_p50": _p50(detect),
        "completion_detect_ms_max": round(max(detect), 2),
    }
    if docker:
        result["exec_ratio"] = round(statistics.median(ex) / statistics.median(cli_ex), 3)
        result["lifecycle_ratio"] = round(statistics.median(life) / statistics.median(cli_life), 3)
        result["baseline"] = {
            "kind": "run",
            "from": "the docker CLI in this run, interleaved with ours: `docker exec CID true`; "
            "`docker run -d --init --entrypoint sleep IMAGE infinity` + `docker rm -f -v`",
        }
    else:
        result["baseline"] = {"kind": "none", "from": f"no CLI baseline for {backend}"}
    result["targets"] = {k: f"{op} {v:g}" for k, (op, v) in TARGETS.items()}
    result["targets_missed"] = missed_targets(result, TARGETS)
    result["targets_met"] = not result["targets_missed"]
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="docker", help="docker | local | e2b | ...")
    parser.add_argument(
        "--image", default=None, help="default: coding-agent-rl/base:latest (docker), host (local)"
    )
    parser.add_argument("--n", type=int, default=20, help="samples per figure")
    parser.add_argument("--poll-s", type=float, default=0.05, help="completion poll interval")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    add_check_argument(parser)


def run(args: argparse.Namespace) -> int:
    from coding_agent_rl.cli import UserError

    if args.n < 1:
        raise UserError("--n must be at least 1")
    image = args.image or ("host" if args.backend == "local" else "coding-agent-rl/base:latest")
    result = asyncio.run(bench(args.backend, image, args.n, args.poll_s))
    return report("sandbox", result, args)

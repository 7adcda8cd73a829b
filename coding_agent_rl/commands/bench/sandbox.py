"""``coding-agent-rl bench sandbox``: our sandbox layer against the docker CLI and SDK, same run.

Exec, lifecycle, isolation cost and completion detection, each the median of ``--n`` interleaved
samples. Baselines and targets: docs/modules/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.commands.bench import (
    Target,
    add_check_argument,
    missed_targets,
    report,
    target_table,
)
from coding_agent_rl.sandbox import create_sandbox
from coding_agent_rl.sandbox.detach import start_detached, wait_detached

TARGETS: dict[str, Target] = {
    "completion_detect_ms_p50": ("<=", 200.0),
}
# The docker backend's, against its two baselines. Against the CLI (a process per call) the
# targets are near-guaranteed; against the docker SDK used directly they are not.
DOCKER_TARGETS: dict[str, Target] = {
    "exec_ratio": ("<=", 1.1),
    "lifecycle_ratio": ("<=", 1.2),
    "sdk_exec_ratio": ("<=", 1.25),
    "sdk_lifecycle_ratio": ("<=", 1.5),
    **TARGETS,
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


PLAIN = {"memory": None, "cpus": None, "pids": None, "disk": None, "nofile": None}


def _sdk_run_kwargs() -> dict[str, Any]:
    """Our default limits and privileges as the docker SDK's ``containers.run`` arguments."""
    import docker.types

    from coding_agent_rl.limits import DEFAULT_LIMITS as L
    from coding_agent_rl.limits import ROOT_CAPS

    assert L.cpus is not None and L.nofile is not None
    return {
        "mem_limit": L.memory,
        "memswap_limit": L.memory,
        "pids_limit": L.pids,
        "nano_cpus": int(float(L.cpus) * 1e9),
        "ulimits": [docker.types.Ulimit(name="nofile", soft=L.nofile, hard=L.nofile)],
        "cap_drop": ["ALL"],
        "cap_add": list(ROOT_CAPS),
        "security_opt": ["no-new-privileges"],
        "network_mode": "none",
    }


def _cli_limit_flags() -> list[str]:
    """Our default limits and privileges as ``docker run`` flags."""
    from coding_agent_rl.limits import DEFAULT_LIMITS as L
    from coding_agent_rl.limits import ROOT_CAPS

    flags = [f"--memory={L.memory}", f"--memory-swap={L.memory}", f"--pids-limit={L.pids}"]
    flags += [f"--cpus={L.cpus}", f"--ulimit=nofile={L.nofile}:{L.nofile}", "--cap-drop=ALL"]
    flags += [f"--cap-add={c}" for c in ROOT_CAPS] + ["--security-opt=no-new-privileges"]
    return [*flags, "--network=none"]


async def bench(backend: str, image: str, n: int, poll_s: float) -> dict[str, Any]:
    from coding_agent_rl.sandbox import BACKENDS

    docker = backend == "docker"
    cls = BACKENDS.load(backend)
    isolated: dict[str, Any] = cls.network_options("none") if cls.listens_inside() else {}
    plain: dict[str, Any] = {**PLAIN, **cls.network_options("open")} if cls.limit_names else {}
    if docker:
        plain["hardened"] = False
    listen_ms: list[float] = []

    async def lifecycle(options: dict[str, Any] = isolated) -> None:
        async with create_sandbox(backend, image, **options) as sb:
            if options is isolated and cls.listens_inside():
                t0 = time.perf_counter()
                (await sb.listen(18001)).close()
                listen_ms.append((time.perf_counter() - t0) * 1000)

    async def cli_lifecycle() -> None:
        cid = await _cli(
            "docker",
            "run",
            "-d",
            "--init",
            "--label",
            "coding-agent-rl.sandbox=1",
            *_cli_limit_flags(),
            "--entrypoint",
            "sleep",
            image,
            "infinity",
        )
        await _cli("docker", "rm", "-f", "-v", cid)

    # What a user would write without us: the docker SDK, one client (pooled HTTP connection),
    # called directly. Blocking calls, made on the loop's thread (nothing else runs meanwhile).
    sdk = None
    if docker:
        import docker as docker_sdk

        sdk = docker_sdk.from_env()
    sdk_kwargs = _sdk_run_kwargs() if docker else {}

    async def sdk_lifecycle() -> None:
        assert sdk is not None
        box = sdk.containers.run(
            image,
            "infinity",
            entrypoint="sleep",
            init=True,
            detach=True,
            labels={"coding-agent-rl.sandbox": "1"},
            **sdk_kwargs,
        )
        box.remove(force=True, v=True)

    await lifecycle()  # warm-up (image cache, client, thread pool)
    if sdk is not None:
        await sdk_lifecycle()
    life, cli_life = await _pair(n, lifecycle, cli_lifecycle if docker else None)
    sdk_life_ours, sdk_life = await _pair(n, lifecycle, sdk_lifecycle if docker else None)
    iso_life, plain_life = await _pair(n, lifecycle, lambda: lifecycle(plain))

    async with (
        create_sandbox(backend, image, **isolated) as sb,
        create_sandbox(backend, image, **plain) as sb_plain,
    ):
        cid = getattr(sb, "container_id", None)
        for _ in range(3):
            await sb.exec("true")
            await sb_plain.exec("true")
        ex, cli_ex = await _pair(
            n,
            lambda: sb.exec("true"),
            (lambda: _cli("docker", "exec", str(cid), "true")) if docker else None,
        )
        sdk_ex_ours: list[float] = []
        sdk_ex: list[float] = []
        if sdk is not None:
            box = sdk.containers.get(str(cid))

            async def sdk_exec() -> None:
                if box.exec_run("true").exit_code != 0:
                    raise RuntimeError("docker SDK exec_run('true') failed")

            sdk_ex_ours, sdk_ex = await _pair(n, lambda: sb.exec("true"), sdk_exec)
        iso_ex, plain_ex = await _pair(n, lambda: sb.exec("true"), lambda: sb_plain.exec("true"))
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
        "isolated_lifecycle_ms_p50": _p50(iso_life),
        "plain_lifecycle_ms_p50": _p50(plain_life),
        "isolation_lifecycle_ratio": round(
            statistics.median(iso_life) / statistics.median(plain_life), 3
        ),
        "isolated_exec_ms_p50": _p50(iso_ex),
        "plain_exec_ms_p50": _p50(plain_ex),
        "isolation_exec_ratio": round(statistics.median(iso_ex) / statistics.median(plain_ex), 3),
        "listen_ms_p50": _p50(listen_ms),
        "isolated_options": isolated,
        "plain_options": plain,
    }
    targets = TARGETS
    if docker:
        assert sdk is not None
        sdk.close()
        targets = DOCKER_TARGETS
        result["exec_ratio"] = round(statistics.median(ex) / statistics.median(cli_ex), 3)
        result["lifecycle_ratio"] = round(statistics.median(life) / statistics.median(cli_life), 3)
        result["sdk_exec_ms_p50"] = _p50(sdk_ex)
        result["sdk_lifecycle_ms_p50"] = _p50(sdk_life)
        result["sdk_exec_ratio"] = round(
            statistics.median(sdk_ex_ours) / statistics.median(sdk_ex), 3
        )
        result["sdk_lifecycle_ratio"] = round(
            statistics.median(sdk_life_ours) / statistics.median(sdk_life), 3
        )
        result["baseline"] = {
            "kind": "run",
            "from": "in this run, interleaved with ours: (1) the docker CLI, `docker exec CID "
            "true`; `docker run -d --init --entrypoint sleep IMAGE infinity` + `docker rm -f -v` "
            "(a process per call: ours beating it is near-guaranteed); (2) the docker SDK used "
            "directly (one client, `exec_run`, `containers.run` + `remove`, same limits), "
            "what a user would write without us: the sdk_* ratios",
        }
    else:
        result["baseline"] = {
            "kind": "none",
            "from": f"no baseline for {backend}: only completion detection has a target",
        }
    result["targets"] = target_table(targets)
    result["targets_missed"] = missed_targets(result, targets)
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
    from coding_agent_rl.errors import UserError

    if args.n < 1:
        raise UserError("--n must be at least 1")
    image = args.image or ("host" if args.backend == "local" else "coding-agent-rl/base:latest")
    result = asyncio.run(bench(args.backend, image, args.n, args.poll_s))
    return report("sandbox", result, args)

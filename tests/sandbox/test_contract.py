"""One contract, every backend: docker (real engine), local (real bwrap), e2b (SDK stand-in)."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from typing import Any

import pytest

from coding_agent_rl.sandbox import (
    CommandFailed,
    ExecResult,
    ImageNotFound,
    Sandbox,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
    create_sandbox,
)
from coding_agent_rl.sandbox.detach import start_detached, wait_detached


async def test_exit_code_and_streams(sb: Sandbox) -> None:
    result = await sb.exec("echo out; echo err >&2; exit 7")
    exit_code, stdout, stderr = result[:3]
    assert (exit_code, stdout, stderr) == (7, "out\n", "err\n")
    assert isinstance(result, ExecResult) and not result.ok and not result.timed_out
    assert (await sb.exec("true")).ok
    with pytest.raises(CommandFailed, match="exit 3"):
        await sb.exec("exit 3", check=True)


async def test_env_cwd_and_user(sb: Sandbox, backend: Any, scratch: str) -> None:
    r = await sb.exec('echo "$GREETING"; pwd; id -un', env={"GREETING": "hi there"}, cwd=scratch)
    assert r.stdout.split("\n")[:3] == ["hi there", scratch, "root"]
    r = await sb.exec("id -un; touch mine && stat -c %U mine", user=backend.non_root, cwd=scratch)
    assert r.stdout.split() == [backend.non_root, backend.non_root], r


async def test_timeout_kills_everything_the_command_started(sb: Sandbox, scratch: str) -> None:
    tag = f"{random.randint(100, 899)}.{random.randint(1000, 9999)}"
    heartbeat = f"{scratch}/heartbeat"
    cmd = (
        f"(while :; do date +%s%N > {heartbeat}; sleep 0.05; done) & "
        f"setsid sleep {tag} & "  # escapes the process group, not the exec
        f"echo started; sleep 1{tag}"
    )
    start = time.monotonic()
    r = await sb.exec(cmd, timeout=1.5)
    assert r.timed_out and r.exit_code == 124
    assert r.stdout == "started\n"  # output up to the timeout is kept
    escaped_s = int(tag.split(".")[0])  # the setsid child's sleep: 100-899 s
    assert time.monotonic() - start < escaped_s / 10  # never waited for what escaped
    first = await sb.read_file(heartbeat)
    await asyncio.sleep(0.5)
    assert await sb.read_file(heartbeat) == first, "the background loop survived the timeout"
    ps = await sb.exec(f"ps -eo stat=,args= | grep 'sleep 1\\?{tag}' | grep -v grep || true")
    alive = [line for line in ps.stdout.splitlines() if not line.startswith("Z")]
    assert alive == [], f"processes survived the timeout: {alive}"


async def test_binary_round_trip_mode_owner_and_parents(
    sb: Sandbox, backend: Any, scratch: str
) -> None:
    every_byte = bytes(range(256)) * 4
    path = f"{scratch}/a/b/c/bytes.bin"
    await sb.write_file(path, every_byte, mode=0o750)
    assert await sb.read_file(path, binary=True) == every_byte
    assert (await sb.exec(f"stat -c %a {path}")).stdout.strip() == "750"
    big = os.urandom(3 * 1024 * 1024 + 17)
    await sb.write_file(f"{scratch}/big.bin", big)
    assert await sb.read_file(f"{scratch}/big.bin", binary=True) == big
    assert (await sb.exec(f"wc -c < {scratch}/big.bin")).stdout.strip() == str(len(big))
    await sb.write_file(f"{scratch}/u/note.txt", "héllo\n", user=backend.non_root)
    owner = await sb.exec(f"stat -c %U {scratch}/u/note.txt")
    assert owner.stdout.strip() == backend.non_root, owner
    assert await sb.read_file(f"{scratch}/u/note.txt", user=backend.non_root) == "héllo\n"


async def test_missing_file_raises_a_typed_error(sb: Sandbox, scratch: str) -> None:
    with pytest.raises(SandboxFileNotFound):
        await sb.read_file(f"{scratch}/does-not-exist")
    with pytest.raises(FileNotFoundError):
        await sb.read_file(f"{scratch}/does-not-exist", binary=True)


async def test_output_is_capped_with_a_visible_marker(backend: Any) -> None:
    async with backend.make(output_cap=1000) as box:
        r = await box.exec("head -c 5000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero >&2")
    assert r.stdout.startswith("a" * 1000) and not r.stdout.startswith("a" * 1001)
    assert "truncated" in r.stdout and "4000 bytes dropped" in r.stdout
    assert "2000 bytes dropped" in r.stderr


async def test_closed_sandbox_refuses_work(backend: Any) -> None:
    box = backend.make()
    async with box:
        assert box.sandbox_id
    with pytest.raises(SandboxGone):
        await box.exec("true")
    with pytest.raises(SandboxError):
        await box.write_file("/tmp/x", b"x")
    await box.close()  # idempotent


async def test_unknown_option_is_rejected(backend: Any) -> None:
    with pytest.raises(ValueError, match=r"'bogus'.*valid: .*output_cap"):
        backend.make(bogus=1)
    with pytest.raises(ValueError, match="output_cap"):
        backend.make(output_cap="big")


async def test_detached_command_is_noticed_with_its_exit_code(sb: Sandbox, scratch: str) -> None:
    marker = f"{scratch}/done"
    await start_detached(
        sb, f"sleep 0.5; echo bye > {scratch}/out; exit 3", marker=marker, log=f"{scratch}/log"
    )
    start, timeout = time.monotonic(), 30.0
    assert await wait_detached(sb, marker, timeout=timeout) == 3
    assert time.monotonic() - start < timeout / 3  # noticed, not waited out
    assert await sb.read_file(f"{scratch}/out") == "bye\n"
    await start_detached(sb, "sleep 30", marker=f"{scratch}/never")
    assert await wait_detached(sb, f"{scratch}/never", timeout=1.2) is None


async def test_concurrent_sandboxes_are_isolated(backend: Any) -> None:
    n = 16 if backend.name == "docker" else 4

    # The stand-in's "VMs" all share this host's /tmp, so only real backends check isolation.
    path = "/tmp/who" if backend.name != "e2b" else None

    async def one(i: int) -> str:
        async with backend.make() as box:
            if path:
                await box.write_file(path, f"{i}\n")
                await asyncio.sleep(0.2)  # let the others write theirs
                return await box.read_file(path)
            return (await box.exec(f"echo {i}")).stdout

    outputs = await asyncio.gather(*(one(i) for i in range(n)))
    assert outputs == [f"{i}\n" for i in range(n)]


async def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="unknown sandbox backend 'nope'; known: docker, e2b, local"
    ):
        create_sandbox("nope", "img")


@pytest.mark.parametrize(
    ("name", "image", "hint"),
    [
        pytest.param(
            "docker",
            "coding-agent-rl/base:no-such-tag",
            "coding-agent-rl images base",
            marks=pytest.mark.docker,
            id="docker-base",
        ),
        pytest.param(
            "docker",
            f"coding-agent-rl/task-{uuid.uuid4().hex[:6]}:latest",
            "coding-agent-rl images build --dataset FILE",
            marks=pytest.mark.docker,
            id="docker-task",
        ),
        pytest.param("local", "/nonexistent/rootfs", "docker export", id="local"),
        pytest.param(
            "e2b", "no-such-template", "e2b template build", id="e2b_against_sdk_stand_in"
        ),
    ],
)
async def test_missing_image_names_the_build_command(
    name: str, image: str, hint: str, request: pytest.FixtureRequest
) -> None:
    if name == "e2b":
        request.getfixturevalue("use_e2b_stand_in")
    with pytest.raises(ImageNotFound) as info:
        async with create_sandbox(name, image):
            pass
    assert hint in str(info.value)


# Not on the e2b stand-in: how envd treats pipes held after exit is E2B's cloud behaviour, which
# the stand-in does not model (so a pass there would prove nothing).
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("docker", marks=pytest.mark.docker, id="docker"),
        pytest.param("local", id="local"),
    ],
    indirect=True,
)
async def test_a_background_child_holding_the_pipes_does_not_block_exec(
    sb: Sandbox, backend: Any, scratch: str
) -> None:
    start, child_s = time.monotonic(), 60
    r = await sb.exec(f"sleep {child_s} & echo $! > {scratch}/pid; echo started", timeout=30)
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "started\n", False)
    # docker waits ~2 s for the pipes, local likewise; never for the child
    assert time.monotonic() - start < child_s / 6
    assert (await sb.exec(f"kill -0 $(cat {scratch}/pid)")).exit_code == 0  # it keeps running
    await sb.exec(f"kill $(cat {scratch}/pid)")

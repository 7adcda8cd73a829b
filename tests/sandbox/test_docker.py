"""Docker backend specifics against the real engine: labels, teardown, gc, options, network."""

from __future__ import annotations

import asyncio
import http.client
import ipaddress
import json
import threading
import time
import uuid

import docker.errors
import pytest
import requests
from support import BASE_IMAGE

from coding_agent_rl.cli import main as cli_main
from coding_agent_rl.sandbox import SandboxError, SandboxGone, create_sandbox
from coding_agent_rl.sandbox import docker as docker_backend
from coding_agent_rl.sandbox import docker_engine as engine

pytestmark = pytest.mark.docker
IMAGE = BASE_IMAGE


def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


def ours(rid: str) -> list[str]:
    return [c["Id"] for c in engine.list_containers(rid)]


async def test_labels_limits_and_options_reach_the_container() -> None:
    rid = run_id()
    async with create_sandbox(
        "docker",
        IMAGE,
        run_id=rid,
        cpus=0.5,
        memory="256m",
        pids=64,
        network="none",
        workdir="/srv",
        env={"FROM_OPTION": "yes"},
        extra_hosts={"adapter.test": "10.1.2.3"},
    ) as sb:
        info = engine.client().api.inspect_container(sb.container_id)
        assert info["Config"]["Labels"] == {
            engine.LABEL_SANDBOX: "1",
            engine.LABEL_RUN: rid,
            **engine.owner_labels(),  # this process: host, boot id, pid, start time
        }
        host = info["HostConfig"]
        assert (host["NanoCpus"], host["Memory"], host["PidsLimit"]) == (5 * 10**8, 256 << 20, 64)
        assert host["NetworkMode"] == "none" and host["Init"] is True
        r = await sb.exec("pwd; echo $FROM_OPTION; getent hosts adapter.test; ls /sys/class/net")
        assert r.stdout.split() == ["/srv", "yes", "10.1.2.3", "adapter.test", "lo"]
        assert ours(rid) == [sb.container_id]
    assert ours(rid) == []


async def test_no_container_survives_an_exception_in_the_body() -> None:
    rid = run_id()
    with pytest.raises(RuntimeError, match="boom"):
        async with create_sandbox("docker", IMAGE, run_id=rid) as sb:
            await sb.exec("true")
            raise RuntimeError("boom")
    assert ours(rid) == []


@pytest.mark.parametrize("when", ["during_create", "during_exec"])
async def test_no_container_survives_a_cancelled_task(when: str) -> None:
    rid = run_id()
    started = asyncio.Event()

    async def body() -> None:
        async with create_sandbox("docker", IMAGE, run_id=rid) as sb:
            started.set()
            await sb.exec("sleep 600")

    task = asyncio.create_task(body())
    if when == "during_create":
        await asyncio.sleep(0.05)  # the create call is in flight on the engine
    else:
        await asyncio.wait_for(started.wait(), 60)
        await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ours(rid) == []


async def test_gc_removes_a_crashed_runs_leftovers() -> None:
    rid = run_id()
    sb = create_sandbox("docker", IMAGE, run_id=rid)
    await sb.__aenter__()  # "crash": never closed
    other = create_sandbox("docker", IMAGE, run_id=run_id())
    async with other:
        assert await engine.gc(rid) == 1
        assert ours(rid) == [] and ours(other.run_id) == [other.container_id]
    with pytest.raises(SandboxGone):
        await sb.exec("true")
    await sb.close()


async def test_sandboxes_cli_lists_and_collects(capsys: pytest.CaptureFixture[str]) -> None:
    rid = run_id()
    sb = create_sandbox("docker", IMAGE, run_id=rid)
    await sb.__aenter__()
    assert await asyncio.to_thread(cli_main, ["sandboxes", "list", "--run-id", rid, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == [sb.sandbox_id] and rows[0]["run"] == rid
    assert await asyncio.to_thread(cli_main, ["sandboxes", "gc", "--run-id", rid]) == 0
    assert "removed 1 " in capsys.readouterr().out
    assert ours(rid) == []
    await sb.close()


async def test_a_container_removed_behind_our_back_is_reported_gone() -> None:
    async with create_sandbox("docker", IMAGE, run_id=run_id()) as sb:
        engine.client().api.remove_container(sb.container_id, force=True)
        with pytest.raises(SandboxGone):
            await sb.exec("true")
        with pytest.raises(SandboxError):
            await sb.write_file("/tmp/x", b"x")


async def test_gateway_reaches_a_host_server_from_the_bridge_only() -> None:
    gateway = engine.gateway_ip()
    assert ipaddress.ip_address(gateway).version == 4
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.readline())
        writer.close()

    server = await asyncio.start_server(handle, "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    probe = f"echo hello-host > /dev/tcp/{gateway}/{port}"
    async with server:
        async with create_sandbox("docker", IMAGE, run_id=run_id()) as sb:
            assert (await sb.exec(probe, timeout=20)).exit_code == 0
        async with create_sandbox("docker", IMAGE, run_id=run_id(), network="none") as sb:
            assert (await sb.exec(probe, timeout=20)).exit_code != 0
    assert got == [b"hello-host\n"]


async def test_files_guard_directories_and_follow_symlinks() -> None:
    async with create_sandbox("docker", IMAGE, run_id=run_id()) as sb:
        await sb.exec("mkdir -p /data/keep && touch /data/keep/a && ln -s /data/real /data/link")
        with pytest.raises(SandboxError, match="is a directory"):
            await sb.write_file("/data/keep", b"x")
        assert (await sb.exec("ls /data/keep")).stdout == "a\n"
        await sb.write_file("/data/real", b"through the link")
        assert await sb.read_file("/data/link") == "through the link"
        with pytest.raises(SandboxError, match="cannot access"):
            await sb.read_file("/root/.bashrc", user="nobody")
        with pytest.raises(ValueError, match="absolute"):
            await sb.read_file("relative/path")


async def test_unknown_exec_user_is_explained() -> None:
    async with create_sandbox("docker", IMAGE, run_id=run_id()) as sb:
        r = await sb.exec("id", user="no-such-user")
    assert r.exit_code == 126 and "no-such-user" in r.stderr


async def test_creation_retries_injected_transient_engine_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = engine.client().api
    real_start = api.start
    failures = [requests.exceptions.ConnectionError("engine hiccup")]

    def flaky_start(container: str) -> None:
        if failures:
            raise failures.pop()
        real_start(container)

    monkeypatch.setattr(api, "start", flaky_start)
    rid = run_id()
    async with create_sandbox("docker", IMAGE, run_id=rid) as sb:
        assert (await sb.exec("echo up")).stdout == "up\n"
        assert ours(rid) == [sb.container_id]  # the failed attempt's container is gone
    assert ours(rid) == []

    response = requests.Response()
    response.status_code = 400
    failures.append(docker.errors.APIError("bad", response=response, explanation="invalid option"))
    with pytest.raises(SandboxError, match="invalid option"):
        async with create_sandbox("docker", IMAGE, run_id=rid):
            pass
    assert ours(rid) == []


async def test_boot_concurrency_bounds_parallel_creations(monkeypatch: pytest.MonkeyPatch) -> None:
    lock, live, peak = threading.Lock(), [0], [0]
    real = docker_backend.DockerSandbox._create_blocking

    def counting(self: docker_backend.DockerSandbox) -> None:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        try:
            real(self)
        finally:
            with lock:
                live[0] -= 1

    monkeypatch.setattr(docker_backend.DockerSandbox, "_create_blocking", counting)
    rid = run_id()

    async def one() -> None:
        async with create_sandbox("docker", IMAGE, run_id=rid, boot_concurrency=2):
            pass

    await asyncio.gather(*(one() for _ in range(6)))
    assert peak[0] == 2
    assert ours(rid) == []


async def test_output_written_before_the_client_reads_the_head_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy client reads the exec's response head late, when the command's first output is
    already on the connection: that output is kept whole and in order."""
    begin = http.client.HTTPResponse.begin

    def late(self: http.client.HTTPResponse) -> None:
        time.sleep(0.4)
        begin(self)

    async with create_sandbox("docker", IMAGE, run_id=run_id()) as sb:
        monkeypatch.setattr(http.client.HTTPResponse, "begin", late)

        async def one(i: int) -> None:
            r = await sb.exec(f"echo START{i}; seq 3000; echo END{i} >&2", timeout=120)
            lines = r.stdout.splitlines()
            assert (lines[:2], len(lines), r.stderr) == ([f"START{i}", "1"], 3001, f"END{i}\n")

        await asyncio.gather(*(one(i) for i in range(4)))

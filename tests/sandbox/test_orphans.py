"""Orphans: sandboxes whose owner process died are removed, with everything they leave; the
sandboxes of live owners, of owners on other hosts and of recycled pids are told apart.

Real components: the Docker engine (containers, volumes, capped disks: loop mounts), bubblewrap,
real processes killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support import BASE_IMAGE

from coding_agent_rl.cli import main as cli_main
from coding_agent_rl.rollout.orphans import OrphanReaper
from coding_agent_rl.sandbox import create_sandbox, owner
from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox.docker import DockerSandbox
from coding_agent_rl.sandbox.local import LocalSandbox, bwrap_reason

TESTS = pathlib.Path(__file__).resolve().parents[1]


class Owner:
    """A child process owning one sandbox (:mod:`support.orphan_owner`)."""

    def __init__(self, backend: str, run_id: str):
        env = {**os.environ, "PYTHONPATH": str(TESTS)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "support.orphan_owner", backend, run_id],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the owner process died: exit {self.proc.wait()}"
        self.facts: dict[str, Any] = json.loads(line)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    made: list[Owner] = []
    yield made
    for o in made:
        o.kill()


def _container_exists(cid: str) -> bool:
    return any(c["Id"] == cid for c in engine.client().api.containers(all=True))


def _volume_exists(name: str) -> bool:
    return any(v["Name"] == name for v in engine.client().api.volumes().get("Volumes") or [])


# ---- the owner record ------------------------------------------------------------------------
def test_the_owner_is_this_process_with_its_start_time_and_other_hosts_are_never_judged() -> None:
    me = owner.current()
    assert me.pid == os.getpid() and me.host == socket.gethostname()
    assert me.start == owner.start_time(os.getpid()) and me.start > 0
    assert me.state() == "alive"
    assert owner.Owner.from_labels(me.labels()) == me
    assert not owner.is_orphan(me.labels())
    # The pid recycled: the process with that pid started at another time.
    assert owner.is_orphan({**me.labels(), owner.LABEL_START: str(me.start + 1)})
    # The host rebooted since: another boot id.
    assert owner.is_orphan({**me.labels(), owner.LABEL_BOOT: "another-boot"})
    # A process that exited (and was waited for).
    child = subprocess.Popen(["true"])
    child.wait()
    gone = owner.Owner(me.host, me.boot, child.pid, 12345)
    assert gone.state() == "gone"
    # Another host's owner: its liveness cannot be checked from here.
    elsewhere = {**me.labels(), owner.LABEL_HOST: "another-host", owner.LABEL_START: "1"}
    assert owner.Owner.from_labels(elsewhere).state() == "elsewhere"  # type: ignore[union-attr]
    assert not owner.is_orphan(elsewhere)
    # Another pid namespace on this host (same host name: a container with --network host):
    # its pids mean nothing here, even a dead-looking one.
    other_ns = {**me.labels(), owner.LABEL_PIDNS: "pid:[1]", owner.LABEL_PID: str(child.pid)}
    assert owner.Owner.from_labels(other_ns).state() == "elsewhere"  # type: ignore[union-attr]
    assert not owner.is_orphan(other_ns)
    assert me.pidns.startswith("pid:[")
    # No owner recorded (a sandbox made before owners were): never an orphan.
    assert not owner.is_orphan({"coding-agent-rl.sandbox": "1"})


def test_a_zombie_owner_is_gone() -> None:
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while owner.start_time(child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # exited, not yet waited for: a zombie, which is no owner
    assert owner.start_time(child.pid) is None
    child.wait()


# ---- docker ----------------------------------------------------------------------------------
@pytest.mark.docker
async def test_a_killed_owners_container_volumes_and_disk_are_reaped_a_live_owners_stay(
    owners: list[Owner], capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = f"test-orphans-{uuid.uuid4().hex[:8]}"
    try:
        dead, alive = Owner("docker", run_id), Owner("docker", run_id)
        # A dead owner whose container someone removed without -v: its volumes and disk stay.
        half = Owner("docker", run_id)
        owners += [dead, alive, half]
        for o in (dead, alive, half):
            assert _container_exists(o.facts["container"])
            assert o.facts["volumes"] and all(_volume_exists(v) for v in o.facts["volumes"])
            assert o.facts["disk"] and os.path.ismount(pathlib.Path(o.facts["disk"]) / "mnt")
        labels = engine.client().api.inspect_container(dead.facts["container"])["Config"]["Labels"]
        assert labels[owner.LABEL_PID] == str(dead.proc.pid)
        assert labels[owner.LABEL_START] == str(owner.start_time(dead.proc.pid))
        dead.kill()
        half.kill()
        engine.client().api.remove_container(half.facts["container"], force=True)  # no -v
        assert all(_volume_exists(v) for v in half.facts["volumes"])
        assert _container_exists(dead.facts["container"])  # nothing removed it so far
        cli = ["sandboxes", "list", "--run-id", run_id, "--json"]
        assert await asyncio.to_thread(cli_main, cli) == 0
        rows = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
        assert rows[dead.facts["container"][:12]]["owner_state"] == "gone"
        assert rows[alive.facts["container"][:12]]["owner_state"] == "alive"
        assert rows[alive.facts["container"][:12]]["owner"].endswith(f":{alive.proc.pid}")

        report = await DockerSandbox.reap_orphans()  # what every runtime start calls

        assert report["containers"] >= 1 and report["volumes"] >= 1 and report["disks"] >= 2
        assert not _container_exists(dead.facts["container"])
        assert not any(_volume_exists(v) for v in dead.facts["volumes"])
        assert not pathlib.Path(dead.facts["disk"]).exists()
        # Volumes found by their owner labels, the disk by its owner file.
        assert not any(_volume_exists(v) for v in half.facts["volumes"])
        assert not pathlib.Path(half.facts["disk"]).exists()
        # The live owner's sandbox is untouched.
        assert _container_exists(alive.facts["container"])
        assert all(_volume_exists(v) for v in alive.facts["volumes"])
        assert os.path.ismount(pathlib.Path(alive.facts["disk"]) / "mnt")
        alive.kill()
        assert await asyncio.to_thread(cli_main, ["sandboxes", "gc", "--orphans"]) == 0
        assert "removed 1 sandbox container(s)" in capsys.readouterr().out
        assert not _container_exists(alive.facts["container"])
        assert not pathlib.Path(alive.facts["disk"]).exists()
        assert engine.list_containers(run_id) == []
    finally:
        await engine.gc_report(run_id)


@pytest.mark.docker
async def test_a_recycled_pid_is_reaped_other_hosts_and_unlabelled_sandboxes_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = f"test-orphans-{uuid.uuid4().hex[:8]}"
    me = owner.current()
    # Same pid (alive: this test), another start time: the pid was recycled by the owner's death.
    recycled = {**me.labels(), owner.LABEL_START: str(me.start + 7)}
    elsewhere = {**me.labels(), owner.LABEL_HOST: "another-host", owner.LABEL_START: "1"}
    made: dict[str, str] = {}
    try:
        for name, labels in (("recycled", recycled), ("elsewhere", elsewhere), ("none", {})):
            monkeypatch.setattr(engine, "owner_labels", lambda labels=labels: dict(labels))
            sb = create_sandbox("docker", BASE_IMAGE, run_id=run_id, disk=None)
            await sb.__aenter__()
            made[name] = sb.container_id  # type: ignore[attr-defined]
        monkeypatch.undo()
        reaper = OrphanReaper("docker", interval_s=0)
        report = await reaper.start()
        assert report["containers"] >= 1
        assert not _container_exists(made["recycled"])
        assert _container_exists(made["elsewhere"]) and _container_exists(made["none"])
        await reaper.stop()
    finally:
        await engine.gc_report(run_id)


@pytest.mark.docker
async def test_the_periodic_reaper_removes_an_orphan_while_the_runtime_runs_and_stops(
    owners: list[Owner],
) -> None:
    run_id = f"test-orphans-{uuid.uuid4().hex[:8]}"
    reaper = OrphanReaper("docker", interval_s=0.5)
    try:
        await reaper.start()
        victim = Owner("docker", run_id)
        owners.append(victim)
        victim.kill()
        deadline = time.monotonic() + 30
        while _container_exists(victim.facts["container"]) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert not _container_exists(victim.facts["container"])
        task = reaper._task
        await reaper.stop()
        assert task is not None and task.done()
    finally:
        await reaper.stop()
        await engine.gc_report(run_id)


# ---- local (bubblewrap) ----------------------------------------------------------------------
def _alive(pid: int) -> bool:
    return owner.start_time(pid) is not None


def _tagged(tag: str) -> list[int]:
    found = []
    for d in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            if tag.encode() in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


async def test_a_local_sandbox_dies_with_its_killed_owner_and_its_leftovers_are_reaped(
    owners: list[Owner],
) -> None:
    reason = bwrap_reason()
    if reason:
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    run_id = uuid.uuid4().hex[:8]
    victim = Owner("local", run_id)
    owners.append(victim)
    facts = victim.facts
    tag = f"orphan-owner-sleep-{run_id}"
    assert _alive(facts["holder"]) and _tagged(tag), "the sandbox and its detached process run"
    store = pathlib.Path(facts["store"])
    assert store.is_dir()
    victim.kill()
    # No process outlives the owner: the holder (--die-with-parent) and, with it, its pid
    # namespace (the detached sleep too).
    deadline = time.monotonic() + 10
    while (_alive(facts["holder"]) or _tagged(tag)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _alive(facts["holder"]) and not _tagged(tag)
    # What stays on the file system is the reaper's.
    assert store.is_dir()

    report = await LocalSandbox.reap_orphans()

    assert report["sandboxes"] >= 1
    assert not store.exists()
    assert not any(pathlib.Path(d).exists() for d in facts["cgroups"])
    if facts["disk"]:
        assert not pathlib.Path(facts["disk"]).exists()
    # A live owner's local sandbox (this process's) is not touched.
    async with create_sandbox("local", "host") as sb:
        await LocalSandbox.reap_orphans()
        assert (await sb.exec("echo alive")).stdout == "alive\n"

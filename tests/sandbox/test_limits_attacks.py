"""Resource and privilege attacks from inside real sandboxes (Docker, bubblewrap), each run with
the defence on and, where it can be switched off, off: the attack must then get through (the
probe is real) and with the defence on it must be stopped and reported as the limit it hit.

The destructive ones are measured in the sandbox's own cgroup (peak memory, processes), never
the whole host's (other work on a shared machine moves those); the "defence off" variants stay
bounded (a fixed number of processes or bytes), never a real bomb.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from support import BASE_IMAGE

from coding_agent_rl.sandbox import create_sandbox
from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox import docker_isolation as iso
from coding_agent_rl.sandbox.disk import disk_dir

BASE = BASE_IMAGE
BACKEND_PARAMS = [pytest.param("docker", marks=pytest.mark.docker), "local"]
OFF = {"memory": None, "pids": None, "disk": None, "cpus": None, "nofile": None}


def make(backend: str, **options):
    if backend == "docker":
        return create_sandbox("docker", BASE, run_id=f"test-lim-{uuid.uuid4().hex[:8]}", **options)
    from coding_agent_rl.sandbox.local import bwrap_reason

    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    return create_sandbox("local", "host", **options)


def own_cgroup(sb) -> dict[str, int]:
    """The sandbox's own cgroup, read on this host: ``memory_peak`` (bytes) and ``pids`` (now)."""
    from coding_agent_rl.sandbox import cgroups

    if getattr(sb, "container_id", None):
        pid = engine.client().api.inspect_container(sb.container_id)["State"]["Pid"]
    else:
        pid = sb._holder_pid
    dirs = cgroups._group_dirs(pid)
    if "" in dirs:  # v2
        memory, pids = dirs[""] / "memory.peak", dirs[""] / "pids.current"
    else:
        memory = dirs["memory"] / "memory.max_usage_in_bytes"
        pids = dirs["pids"] / "pids.current"
    return {"memory_peak": int(memory.read_text()), "pids": int(pids.read_text())}


HOG = "python3 -c 'x = bytearray(400 << 20); x[::4096] = b\"x\" * len(x[::4096])'; echo exit=$?"


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_memory_hog_is_killed_and_named(backend):
    hog = HOG
    async with make(backend, memory="128m") as sb:
        r = await sb.exec(hog, user="nobody", timeout=60)
        breaches = await sb.limit_breaches()
        own = own_cgroup(sb)
    assert "exit=137" in r.stdout, r
    assert any(b.startswith("memory limit 128 MiB exceeded") for b in breaches), breaches
    assert own["memory_peak"] <= 128 << 20, own  # it never held more than its cap
    # Defence off: the same hog gets its 400 MiB, every page touched (exit 0, not killed).
    async with make(backend, **OFF) as sb:
        r = await sb.exec(hog, user="nobody", timeout=60)
        assert "exit=0" in r.stdout and await sb.limit_breaches() == [], r


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_fork_bomb_is_bounded_and_named(backend):
    spawn = "for i in $(seq 150); do sleep 30 & done 2>/dev/null; jobs -p | wc -l"
    async with make(backend, pids=64) as sb:
        bomb = "timeout 3 bash -c 'b() { b | b & }; b' >/dev/null 2>&1; sleep 1; echo done"
        r = await sb.exec(bomb, user="nobody", timeout=60)
        breaches = await sb.limit_breaches()
        own = own_cgroup(sb)
    assert any(b.startswith("pids limit 64 reached") for b in breaches), (breaches, r)
    assert 0 < own["pids"] <= 64, own  # what is left of it is inside its 64
    async with make(backend, **OFF) as sb:  # defence off: a bounded stand-in, all 150 start
        assert int((await sb.exec(spawn, user="nobody")).stdout.split()[-1]) == 150


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_filling_the_disk_stops_at_the_cap_and_is_named(backend):
    fill = "dd if=/dev/zero of={} bs=1M count=200 2>&1; echo exit=$?"
    async with make(backend, disk="64m", writable=["/srv/work"]) as sb:
        disk = sb._disk if backend == "docker" else sb._limits.disk
        assert disk is not None and disk.image.is_file()
        await sb.exec("mkdir -p /srv/work && chmod 777 /srv/work")
        r1 = await sb.exec(fill.format("/tmp/fill"), user="nobody", timeout=60)
        r2 = await sb.exec(fill.format("/srv/work/fill"), user="nobody", timeout=60)
        breaches = await sb.limit_breaches()
    for r in (r1, r2):
        assert "No space left on device" in r.stdout and "exit=1" in r.stdout, r
    assert any(b.startswith("disk limit 64 MiB reached") for b in breaches), breaches
    assert not disk.dir.exists() and not os.path.ismount(disk.mnt)  # nothing stayed behind
    async with make(backend, **OFF) as sb:  # defence off: 200 MiB land on the host's disk
        r = await sb.exec(fill.format("/tmp/fill"), user="nobody", timeout=60)
        assert "exit=0" in r.stdout and "209715200 bytes" in r.stdout, r


@pytest.mark.docker
async def test_the_agent_can_write_only_on_the_capped_disk():
    """The class, not one path: every place the unprivileged user can write on the container's
    own file system is found and must be none (they are all volumes on the capped disk)."""
    # writable paths on the root file system itself (a mount point shows its own device)
    find = (
        "r=$(stat -c %d /); find / -xdev \\( -path /proc -o -path /sys -o -path /dev \\) -prune "
        "-o ! -type l -writable -printf '%D %p\\n' 2>/dev/null | awk -v r=$r '$1 == r {print $2}'"
    )
    async with make("docker", writable=["/srv/work"]) as sb:
        assert (await sb.exec(find, user="nobody")).stdout.split() == []
    async with make("docker", disk=None) as sb:  # defence off: the world-writable folders
        found = set((await sb.exec(find, user="nobody")).stdout.split())
    assert {"/tmp", "/var/tmp", "/run/lock"} <= found, found


BLOB = "head -c 100000000 /dev/zero > /opt/blob; stat -c %s /opt/blob"  # root, outside the disk


@pytest.mark.docker
@pytest.mark.parametrize("watched", [False, True], ids=["backstop_off", "backstop_on"])
async def test_the_writable_layer_is_watched_as_a_backstop(monkeypatch, watched):
    """Should an image have a writable place we did not cap, the writable layer is measured.
    Backstop off (never measured): the 100 MB land past the 64 MiB cap and nothing is named."""
    monkeypatch.setattr(iso, "UPPER_CHECK_S", 0.0 if watched else float("inf"))
    async with make("docker", disk="64m") as sb:
        r = await sb.exec(BLOB)
        breaches = await sb.limit_breaches()
    assert r.stdout.strip() == "100000000", r  # the write itself is not what the cap stops
    assert any("writable layer" in b for b in breaches) is watched, breaches


@pytest.mark.docker
async def test_breaches_are_read_inside_when_the_engine_is_elsewhere():
    async with make("docker", memory="96m", pids=32) as sb:
        sb._watch.pid = None  # as with DOCKER_HOST=tcp://...: no host view of the cgroup
        spawn = "import subprocess as s\nfor _ in range(60): s.Popen(['sleep', '1'], stdout=s.DEVNULL, stderr=s.DEVNULL)"
        r = await sb.exec(f'{HOG}; python3 -c "{spawn}"')
        breaches = await sb.limit_breaches()
    assert [b.split(" limit")[0] for b in breaches] == ["memory", "pids"], (breaches, r)


SETUID_SHELL = "cp /bin/bash /usr/local/bin/rootsh && chmod 4755 /usr/local/bin/rootsh"
CAPS = "grep -E '^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs)' /proc/self/status | tr -s '\\t' ' '"


@pytest.mark.docker
async def test_no_privilege_escalation_through_a_setuid_binary():
    """An image with a setuid-root shell (or sudo, su ...): the agent stays itself."""
    escalate = "/usr/local/bin/rootsh -p -c 'id -u'"
    async with make("docker") as sb:
        await sb.exec(SETUID_SHELL, check=True)
        assert (await sb.exec(escalate, user="nobody")).stdout.strip() == "65534"
        caps = dict(
            line.split(": ") for line in (await sb.exec(CAPS, user="nobody")).stdout.splitlines()
        )
        root_caps = (await sb.exec("grep CapEff /proc/self/status")).stdout.split()[1]
    assert {k: v.strip() for k, v in caps.items()} == {
        "CapInh": "0000000000000000",
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapAmb": "0000000000000000",
        "NoNewPrivs": "1",
    }
    # Root keeps chown, dac_override, fowner, setgid, setuid, kill (bits 0,1,3,5,6,7).
    assert int(root_caps, 16) == 0b11101011
    async with make("docker", hardened=False) as sb:  # defence off: the setuid shell is root
        await sb.exec(SETUID_SHELL, check=True)
        assert (await sb.exec(escalate, user="nobody")).stdout.strip() == "0"


async def test_local_sandbox_users_have_no_capabilities():
    async with make("local") as sb:
        out = (await sb.exec(CAPS, user="nobody")).stdout
        root_caps = (await sb.exec("grep CapEff /proc/self/status")).stdout.split()[1]
    assert "CapEff: 0000000000000000" in out and "NoNewPrivs: 1" in out, out
    assert int(root_caps, 16) == 0b11101011  # the same six as in Docker


# Raise the soft limit to the hard one, then hold 5000 descriptors open.
FD_HOG = (
    "python3 -c 'import os, resource; h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (h, h)); "
    'fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(5000)]; print("held", len(fds))\''
    " 2>&1; echo exit=$?"
)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_open_files_are_capped(backend):
    async with make(backend, nofile=4096) as sb:
        r = await sb.exec("ulimit -n; ulimit -n 100000 2>&1; echo exit=$?", user="nobody")
        hog = await sb.exec(FD_HOG, user="nobody")
    assert r.stdout.splitlines()[0] == "4096" and "exit=1" in r.stdout, r
    assert "Too many open files" in hog.stdout and "exit=1" in hog.stdout, hog
    async with make(backend, **OFF) as sb:  # defence off: the 5000 descriptors are held
        hog = await sb.exec(FD_HOG, user="nobody")
    assert "held 5000" in hog.stdout and "exit=0" in hog.stdout, hog


@pytest.fixture(scope="module")
def slugify_row():
    from coding_agent_rl.datasets.schema import load_dataset
    from coding_agent_rl.images.dataset import build_dataset_images

    tasks = pathlib.Path(__file__).parents[2] / "coding_agent_rl/datasets/examples/tasks.jsonl"
    build_dataset_images(tasks)
    return next(r for r in load_dataset(tasks) if r.instance_id == "example__slugify")


@pytest.mark.docker
async def test_grading_sandboxes_get_the_limits_too(slugify_row):
    from coding_agent_rl.grading.prepared import sandbox_options_for

    row = slugify_row
    opts = sandbox_options_for("docker", {"run_id": f"test-lim-{uuid.uuid4().hex[:8]}"}, row)
    async with create_sandbox("docker", row.image, **opts) as sb:
        info = engine.client().api.inspect_container(sb.container_id)
        r = await sb.exec(f"findmnt -no OPTIONS {row.workdir}; ls {row.workdir}")
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["Memory"] == host["MemorySwap"] == 4 << 30
    assert host["PidsLimit"] == 1024 and "no-new-privileges" in host["SecurityOpt"]
    assert "nosuid" in r.stdout and "textkit" in r.stdout  # the repo, copied onto the disk


CRASHING = textwrap.dedent("""
    import asyncio, sys
    from coding_agent_rl.sandbox import create_sandbox
    async def main():
        sb = create_sandbox("docker", "coding-agent-rl/base:latest", run_id=sys.argv[1])
        await sb.__aenter__()
        print("up", flush=True)
        await asyncio.sleep(600)
    asyncio.run(main())
""")


@pytest.mark.docker
def test_gc_removes_what_a_crashed_run_left(tmp_path):
    """SIGKILL the process that owns a sandbox; `sandboxes gc --run-id` removes the container,
    its volumes, and unmounts and deletes its capped disk."""
    run_id = f"test-crash-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "crash.py"
    script.write_text(CRASHING)
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, str(script), run_id], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    disks = list((disk_dir() / run_id).glob("*/mnt"))
    assert len(disks) == 1 and os.path.ismount(disks[0])
    assert len(engine.list_containers(run_id)) == 1
    volumes = engine.client().api.volumes(filters={"label": f"{engine.LABEL_RUN}={run_id}"})
    assert volumes["Volumes"]
    cli = [sys.executable, "-m", "coding_agent_rl.cli", "sandboxes", "gc", "--run-id", run_id]
    out = subprocess.run(cli, capture_output=True, text=True, env=env, check=True).stdout
    assert "removed 1 sandbox container(s)" in out and "1 capped disk(s)" in out, out
    assert engine.list_containers(run_id) == [] and not (disk_dir() / run_id).exists()
    assert not os.path.ismount(disks[0])
    volumes = engine.client().api.volumes(filters={"label": f"{engine.LABEL_RUN}={run_id}"})
    assert not volumes["Volumes"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and str(disks[0].parent) in _losetup():
        time.sleep(0.2)
    assert str(disks[0].parent) not in _losetup()


def _losetup() -> str:
    return subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


@pytest.mark.docker
async def test_the_agent_user_owns_only_the_workdir_and_its_home():
    from coding_agent_rl.harness.agent_user import ensure_agent_user

    async with make("docker", writable=["/srv/work"]) as sb:
        await sb.exec("mkdir -p /srv/work/pkg && touch /srv/work/pkg/m.py /srv/other", check=True)
        await ensure_agent_user(sb, "agent", "/home/agent", "/srv/work")
        owned = (
            await sb.exec(
                "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -user agent -print"
            )
        ).stdout.split()
    assert "/srv/work/pkg/m.py" in owned and "/home/agent" in owned
    assert all(p.startswith(("/srv/work", "/home/agent")) for p in owned), owned


async def test_local_sandboxes_cannot_read_each_others_private_copies(monkeypatch):
    """Host-mode local sandboxes show the host read-only: not the capped disks, where every
    sandbox keeps its private copies (a sibling rollout's solution would be there)."""
    from coding_agent_rl.sandbox import local_view

    look = "grep -rl SIBLING-SECRET / --include=solution.py 2>/dev/null | head -3"
    async with make("local") as a:
        await a.write_file("/workspace/solution.py", "SIBLING-SECRET = 1\n")
        async with make("local") as b:
            assert (await b.exec(look, timeout=300)).stdout.strip() == ""
        # Defence off (the disks shown like the rest of the host): the secret is found.
        monkeypatch.setattr(local_view, "disk_dir", lambda: pathlib.Path("/nonexistent"))
        async with make("local") as b:
            assert "solution.py" in (await b.exec(look, timeout=300)).stdout


@pytest.mark.docker
async def test_nothing_is_left_when_the_container_was_removed_under_us():
    """`docker rm -f` (no -v) by someone else: closing still removes the disk's volumes and the
    disk itself."""
    run_id = f"test-lim-{uuid.uuid4().hex[:8]}"
    labels = {"label": f"{engine.LABEL_RUN}={run_id}"}
    async with create_sandbox("docker", BASE, run_id=run_id) as sb:
        assert len(engine.client().api.volumes(filters=labels)["Volumes"]) == 4
        subprocess.run(["docker", "rm", "-f", sb.container_id], check=True, capture_output=True)
    assert not engine.client().api.volumes(filters=labels)["Volumes"]
    assert not (disk_dir() / run_id).exists()

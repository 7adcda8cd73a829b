"""Local (bubblewrap) backend specifics with the real bwrap: isolation, persistence, rootfs mode."""

from __future__ import annotations

import pathlib
import subprocess
import uuid

import pytest
from support import BASE_IMAGE

from coding_agent_rl.sandbox import SandboxCreateError, SandboxError, create_sandbox
from coding_agent_rl.sandbox import local as local_backend


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    reason = local_backend.bwrap_reason()
    if reason:
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")


def host_processes(pattern: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if pattern in line and not line.startswith("Z")]


async def test_host_mode_hides_host_secrets_and_keeps_writes_private(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "main.py").write_text("print('v1')\n")
    async with create_sandbox("local", "host", workspace=str(tmp_path / "repo")) as sb:
        r = await sb.exec("pwd; cat main.py; ls -A /root /home /run; ls /var/run/docker.sock")
        assert r.stdout.split() == ["/workspace", "print('v1')", "/home:", "/root:", "/run:"]
        assert "No such file" in r.stderr
        await sb.exec("echo \"print('v2')\" > main.py && echo state > /root/kept", check=True)
        assert (
            await sb.exec("cat /root/kept; cat /workspace/main.py")
        ).stdout == "state\nprint('v2')\n"
        with pytest.raises(SandboxError, match="Read-only"):
            await sb.write_file("/usr/local/evil", b"x")
    assert (tmp_path / "repo" / "main.py").read_text() == "print('v1')\n"  # the source is intact


async def test_network_is_private_unless_host() -> None:
    async with create_sandbox("local", "host") as sb:
        devices = (await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1")).stdout.split()
    assert devices == ["lo"]
    async with create_sandbox("local", "host", network="host") as sb:
        devices = (await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1")).stdout.split()
    assert len(devices) > 1
    with pytest.raises(ValueError, match="network"):
        create_sandbox("local", "host", network="bridge")


async def test_detached_processes_persist_between_execs_and_die_with_the_sandbox() -> None:
    tag = f"{uuid.uuid4().int % 900 + 100}.{uuid.uuid4().int % 9000 + 1000}"
    async with create_sandbox("local", "host") as sb:
        await sb.exec(f"setsid nohup sleep {tag} > /dev/null 2>&1 < /dev/null &", check=True)
        listed = (await sb.exec("ps -eo args=")).stdout
        assert f"sleep {tag}" in listed
        assert host_processes(f"sleep {tag}")
    assert host_processes(f"sleep {tag}") == []


async def test_missing_bwrap_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_backend.shutil, "which", lambda name: None)
    with pytest.raises(SandboxCreateError, match="apt-get install bubblewrap"):
        async with create_sandbox("local", "host"):
            pass


@pytest.mark.docker
async def test_rootfs_mode_never_writes_into_the_source_tree(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    cid = subprocess.run(
        ["docker", "create", BASE_IMAGE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        with subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE) as export:
            subprocess.run(["tar", "-x", "-C", str(root)], stdin=export.stdout, check=True)
    finally:
        subprocess.run(["docker", "rm", cid], capture_output=True)
    (root / "srv" / "repo").mkdir(parents=True)
    (root / "srv" / "repo" / "a.txt").write_text("original\n")
    before = sorted(str(p) for p in root.rglob("*") if "proc" not in p.parts)
    async with create_sandbox("local", str(root), writable=["/srv/repo"]) as sb:
        r = await sb.exec("cat /etc/debian_version; python3 -c 'print(6*7)'; cat /srv/repo/a.txt")
        assert r.exit_code == 0 and r.stdout.split("\n")[1:3] == ["42", "original"]
        await sb.exec(
            "echo changed > /srv/repo/a.txt; echo x > /root/new; echo y > /tmp/new", check=True
        )
        assert (await sb.exec("cat /srv/repo/a.txt")).stdout == "changed\n"
        with pytest.raises(SandboxError, match="Read-only"):
            await sb.write_file("/etc/new", b"x")
        assert (await sb.exec("id -un", user="nobody")).stdout == "nobody\n"
    assert (root / "srv" / "repo" / "a.txt").read_text() == "original\n"
    assert sorted(str(p) for p in root.rglob("*") if "proc" not in p.parts) == before

"""The agent CLI bind-mounted from the host cache (no upload): found in place, ``--version`` run
once per image, a binary that does not run still refused; configure's single exec."""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid

import pytest
from support import BASE_IMAGE

from coding_agent_rl.harness import AdapterUnreachable, HarnessContext, InstallError, get_harness
from coding_agent_rl.harness.codex import Codex
from coding_agent_rl.sandbox import create_sandbox
from coding_agent_rl.sandbox.docker import gateway_ip

pytestmark = pytest.mark.docker
IMAGE = BASE_IMAGE
RUN_ID = f"mount-install-tests-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=coding-agent-rl.run={RUN_ID}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == [], "a sandbox container was left behind"


def fake_codex_tarball(path, version_script: str):
    """A user tarball (``SLIME_AGENT_CODEX_TARBALL``) whose codex is a shell script."""
    with tarfile.open(path, "w:gz") as tar:
        for member, text in zip(Codex.package.files, (version_script, "#!/bin/sh\n"), strict=True):
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return path


class CountingExecs:
    """Counts the execs a step sends to a real sandbox."""

    def __init__(self, sb):
        self.sb, self.execs = sb, 0

    async def exec(self, cmd, **kw):
        self.execs += 1
        return await self.sb.exec(cmd, **kw)

    def __getattr__(self, name):
        return getattr(self.sb, name)


def mounted(harness, **options):
    return create_sandbox("docker", IMAGE, run_id=RUN_ID, mounts=harness.host_mounts(), **options)


@pytest.mark.agents
async def test_the_pinned_cli_is_mounted_and_trusted_without_an_exec():
    h = get_harness("claude_code", extra_args=[], extra_env={})
    mounts = h.host_mounts()
    assert list(mounts.values()) == ["/opt/coding-agent-rl/bin/claude"]
    async with mounted(h, network="none") as sb:
        counting = CountingExecs(sb)
        report = await h.install(counting)
        # Unpacked from the integrity-checked pinned tarball: its version is known.
        assert (report.source, report.version, report.upload_bytes) == ("mount", "2.1.332", 0)
        assert counting.execs == 0
        # No stamp and no copy: the file in the sandbox is the host's, read-only, and it runs.
        assert (await sb.exec("ls -A /opt/coding-agent-rl/bin")).stdout.split() == ["claude"]
        await sb.exec("useradd -m agent", check=True)
        ran = await sb.exec("/opt/coding-agent-rl/bin/claude --version", user="agent")
        assert ran.ok and ran.stdout.startswith("2.1.332")


async def test_another_file_at_the_cli_path_is_version_checked(tmp_path):
    # Mounted by hand (not the cache's copy): --version runs, once per image.
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho 2.1.332 fake\n")
    fake.chmod(0o755)
    h = get_harness("claude_code", extra_args=[], extra_env={})
    opts = {"network": "none", "run_id": RUN_ID}
    mounts = {str(fake): "/opt/coding-agent-rl/bin/claude"}
    async with create_sandbox("docker", IMAGE, mounts=mounts, **opts) as sb:
        counting = CountingExecs(sb)
        first = await h.install(counting)
        assert (first.source, first.version, counting.execs) == ("mount", "2.1.332 fake", 1)
    async with create_sandbox("docker", IMAGE, mounts=mounts, **opts) as sb:
        counting = CountingExecs(sb)
        again = await h.install(counting)
        assert (again.version, again.version_s, counting.execs) == (first.version, 0.0, 0)


async def test_a_mounted_binary_that_does_not_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    tgz = fake_codex_tarball(tmp_path / "broken.tgz", "#!/bin/sh\necho 'no luck' >&2\nexit 139\n")
    monkeypatch.setenv("SLIME_AGENT_CODEX_TARBALL", str(tgz))
    h = get_harness("codex", extra_args=[], extra_env={})
    async with mounted(h, network="none") as sb:
        with pytest.raises(InstallError, match=r"mounted from .* exit 139.*no luck"):
            await h.install(sb)
    # A user tarball has no pinned version: any binary that runs is accepted.
    good = fake_codex_tarball(tmp_path / "good.tgz", "#!/bin/sh\necho codex-cli 9.9.9-mine\n")
    monkeypatch.setenv("SLIME_AGENT_CODEX_TARBALL", str(good))
    h = get_harness("codex", extra_args=[], extra_env={})
    async with mounted(h, network="none") as sb:
        report = await h.install(sb)
        assert (report.source, report.version) == ("mount", "codex-cli 9.9.9-mine")


async def test_configure_is_one_exec_with_files_owned_by_the_agent(tmp_path):
    import socket

    h = get_harness("codex", extra_args=[], extra_env={})
    with socket.socket() as listener:
        listener.bind((gateway_ip(), 0))
        listener.listen()
        port = listener.getsockname()[1]
        async with create_sandbox("docker", IMAGE, run_id=RUN_ID) as sb:
            await sb.exec("mkdir -p /work && touch /work/f", check=True)
            ctx = HarnessContext(
                adapter_url=f"http://{gateway_ip()}:{port}",
                session_id="sid",
                model="policy",
                workdir="/work",
            )
            counting = CountingExecs(sb)
            await h.configure(counting, ctx)
            assert counting.execs == 1
            r = await sb.exec(
                "stat -c '%U %a' /home/agent/.codex/config.toml /home/agent/.codex /work/f; "
                "grep -c wire_api /home/agent/.codex/config.toml"
            )
            assert r.stdout.split("\n")[:4] == ["agent 600", "agent 755", "agent 644", "1"]
            bad = HarnessContext(
                adapter_url=f"http://{gateway_ip()}:1",
                session_id="sid",
                model="policy",
                workdir="/work",
            )
            with pytest.raises(AdapterUnreachable, match="ADAPTER_PUBLIC_HOST"):
                await h.configure(sb, bad)


@pytest.mark.agents
async def test_a_mounted_python_cli_is_checked_once_per_image():
    """mini-swe-agent's folder mounted from the host cache: its import check runs in the first
    sandbox of an image, not in the next."""
    h = get_harness("mini_swe_agent", extra_args=[], extra_env={})
    opts = {"network": "none", "run_id": RUN_ID}
    reports = []
    for _ in range(2):
        async with create_sandbox("docker", IMAGE, mounts=h.host_mounts(), **opts) as sb:
            counting = CountingExecs(sb)
            reports.append((await h.install(counting), counting.execs))
    (first, n1), (again, n2) = reports
    assert (first.source, first.binary, first.version, n1) == ("mount", h.binary, "2.4.6", 1)
    assert first.version_s > 0
    assert (again.source, again.version, again.version_s, n2) == ("mount", "2.4.6", 0.0, 0)

"""The docker backend's read-only bind mounts (how an agent CLI reaches every sandbox without an
upload): visible, not writable even by root, never created on the host when missing."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from support import BASE_IMAGE

from coding_agent_rl.sandbox import SandboxCreateError, create_sandbox

pytestmark = pytest.mark.docker
IMAGE = BASE_IMAGE
RUN_ID = f"mount-tests-{uuid.uuid4().hex[:8]}"


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


async def test_a_host_file_is_mounted_read_only(tmp_path):
    host = tmp_path / "tool"
    host.write_text("#!/bin/sh\necho tool 1.2.3\n")
    host.chmod(0o755)
    target = "/opt/coding-agent-rl/bin/tool"
    async with create_sandbox(
        "docker", IMAGE, network="none", run_id=RUN_ID, mounts={str(host): target}
    ) as sb:
        assert sb.mounts == {str(host): target}
        assert (await sb.exec(target)).stdout == "tool 1.2.3\n"
        wrote = await sb.exec(f"echo evil > {target}")
        assert wrote.exit_code != 0 and "Read-only" in wrote.stderr
        removed = await sb.exec(f"rm -f {target}")
        assert removed.exit_code != 0
        # The folder around it is the sandbox's own: other files can go next to it.
        assert (await sb.exec("touch /opt/coding-agent-rl/bin/other")).ok
    assert host.read_text() == "#!/bin/sh\necho tool 1.2.3\n"


async def test_a_missing_host_path_fails_the_creation_and_creates_nothing(tmp_path):
    missing = tmp_path / "no-such-file"
    sb = create_sandbox(
        "docker", IMAGE, network="none", run_id=RUN_ID, mounts={str(missing): "/opt/x"}
    )
    with pytest.raises(SandboxCreateError, match=r"(?i)mount|bind"):
        async with sb:
            pass
    assert not missing.exists()  # a legacy volume bind would have made a directory here


@pytest.mark.parametrize(
    "mounts", [{"relative/path": "/opt/x"}, {"/etc/hostname": "opt/x"}], ids=["host", "target"]
)
def test_relative_paths_and_bad_types_are_rejected(mounts):
    with pytest.raises(ValueError, match="absolute"):
        create_sandbox("docker", IMAGE, mounts=mounts)
    with pytest.raises(ValueError, match="mounts"):
        create_sandbox("docker", IMAGE, mounts=["/etc/hostname"])

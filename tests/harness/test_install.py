"""Offline install into a real Docker sandbox: upload, reuse, the image's own copy, gzip uploads,
user tarballs and broken binaries."""

from __future__ import annotations

import io
import tarfile
import time

import pytest

from coding_agent_rl.harness import InstallError, get_harness
from coding_agent_rl.harness.codex import Codex

pytestmark = pytest.mark.docker
CODEX, RG = Codex.package.files.keys()


def fake_codex_tarball(path, version_script: str):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in ((CODEX, version_script), (RG, "#!/bin/sh\necho ripgrep 0\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.agents
async def test_upload_then_reuse_then_the_images_own_copy(sandbox):
    h = get_harness("codex", extra_args=[], extra_env={})
    t0 = time.monotonic()
    first = await h.install(sandbox)
    first_s = time.monotonic() - t0
    assert (first.source, first.version) == ("upload", "codex-cli 0.171.0")
    assert first.binary == "/opt/coding-agent-rl/bin/codex" and first.upload_bytes > 300e6
    assert (await sandbox.exec("/opt/coding-agent-rl/bin/rg --version")).ok

    t0 = time.monotonic()
    again = await h.install(sandbox)
    again_s = time.monotonic() - t0
    assert again.source == "installed" and again.upload_bytes == 0
    assert again_s < first_s / 3, (again_s, first_s)  # a version check, not a 300 MB upload

    # An image that already ships the pinned version: linked, not uploaded.
    await sandbox.exec(
        "mv /opt/coding-agent-rl/bin/codex /usr/local/bin/codex && rm /opt/coding-agent-rl/bin/.codex.version",
        check=True,
    )
    image = await h.install(sandbox)
    assert image.source == "image" and image.upload_bytes == 0
    link = await sandbox.exec("readlink /opt/coding-agent-rl/bin/codex")
    assert link.stdout.strip() == "/usr/local/bin/codex"

    # An image with another version: ours is uploaded next to it.
    await sandbox.exec(
        "rm /opt/coding-agent-rl/bin/codex && printf '#!/bin/sh\\necho codex-cli 0.1.0\\n' > /usr/local/bin/codex",
        check=True,
    )
    assert (await h.install(sandbox)).source == "upload"


@pytest.mark.agents
async def test_gzip_upload_for_remote_backends(sandbox):
    report = await get_harness("opencode", upload="gzip", extra_args=[], extra_env={}).install(
        sandbox
    )
    assert report.source == "upload" and report.version == "1.18.33"
    assert report.upload_bytes < 100e6  # the 176 MB binary travels as ~64 MB
    assert (await sandbox.exec("ls /opt/coding-agent-rl/bin/*.gz 2>/dev/null")).stdout == ""


async def test_a_user_tarball_wins_over_the_images_copy(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    tgz = fake_codex_tarball(tmp_path / "my-codex.tgz", "#!/bin/sh\necho codex-cli 9.9.9-custom\n")
    monkeypatch.setenv("SLIME_AGENT_CODEX_TARBALL", str(tgz))
    await sandbox.exec(
        "printf '#!/bin/sh\\necho codex-cli 0.171.0\\n' > /usr/local/bin/codex && chmod +x /usr/local/bin/codex",
        check=True,
    )
    report = await get_harness("codex", extra_args=[], extra_env={}).install(sandbox)
    assert (report.source, report.version) == ("upload", "codex-cli 9.9.9-custom")


async def test_a_binary_that_does_not_run_is_an_install_error(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("CODING_AGENT_RL_CACHE", str(tmp_path / "cache"))
    tgz = fake_codex_tarball(
        tmp_path / "broken.tgz", "#!/bin/sh\necho 'segfault-ish' >&2\nexit 139\n"
    )
    monkeypatch.setenv("SLIME_AGENT_CODEX_TARBALL", str(tgz))
    with pytest.raises(InstallError, match=r"exit 139.*segfault-ish"):
        await get_harness("codex", extra_args=[], extra_env={}).install(sandbox)
    monkeypatch.setenv("SLIME_AGENT_CODEX_TARBALL", str(tmp_path / "missing.tgz"))
    with pytest.raises(InstallError, match="SLIME_AGENT_CODEX_TARBALL"):
        await get_harness("codex", extra_args=[], extra_env={}).install(sandbox)

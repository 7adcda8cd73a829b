"""Local images and what rollouts need from the local sandbox, with the real bwrap and the real
debootstrap base (built into the store on first use, ~2 min; reused afterwards): the Dockerfile
subset, the image's ENV and WORKDIR, nested writable paths, read-only mounts a non-root user can
run, users created inside the sandbox, grading with the network off. No container engine."""

from __future__ import annotations

import pathlib
import shutil
import uuid

import pytest

from coding_agent_rl.datasets.buildspec import BuildSpec
from coding_agent_rl.grading.prepared import sandbox_options_for
from coding_agent_rl.images import rootfs
from coding_agent_rl.images.common import ImageBuildError
from coding_agent_rl.images.dataset import build_rootfs_image
from coding_agent_rl.sandbox import SandboxError, create_sandbox
from coding_agent_rl.sandbox.local import bwrap_reason

DOCKERFILE = """# a comment
FROM coding-agent-rl/base:latest
LABEL purpose=test
ENV GREETING="hello world" \\
    MODE=test
WORKDIR /srv/app
COPY src/ ./
COPY one.txt /data/
COPY --chown=nobody:nogroup one.txt owned.txt
RUN echo "$GREETING from $(pwd)" > greeting && git init -q . && git add -A \\
 && git -c user.name=t -c user.email=t@t commit -qm init
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory):
    """A task image built from ``DOCKERFILE``; removed from the store afterwards."""
    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    ctx = tmp_path_factory.mktemp("ctx")
    (ctx / "src" / "pkg").mkdir(parents=True)
    (ctx / "src" / "pkg" / "mod.py").write_text("X = 1\n")
    (ctx / "one.txt").write_text("one\n")
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    name = f"car-test/local-{uuid.uuid4().hex[:8]}:latest"
    spec = BuildSpec(ctx, ctx / "Dockerfile")
    try:
        assert build_rootfs_image(name, spec) is True
        assert build_rootfs_image(name, spec) is False  # up to date: reused
        yield name
    finally:
        shutil.rmtree(rootfs.image_dir(name), ignore_errors=True)


async def test_a_dockerfile_builds_a_root_filesystem_with_env_and_workdir(image: str) -> None:
    stored = rootfs.find(image)
    assert stored is not None and stored.workdir == "/srv/app"
    assert stored.env == {"GREETING": "hello world", "MODE": "test"}
    base = rootfs.find(rootfs.BASE_IMAGE)
    assert base is not None and not (base.root / "srv/app").exists()  # the parent is untouched
    async with create_sandbox("local", image) as sb:
        r = await sb.exec(
            'pwd; echo "$GREETING/$MODE"; cat greeting pkg/mod.py /data/one.txt; '
            "stat -c %U owned.txt; git log --oneline | wc -l; git status --short",
            check=True,
        )
    assert r.stdout.splitlines() == [
        "/srv/app",
        "hello world/test",
        "hello world from /srv/app",
        "X = 1",
        "one",
        "nobody",
        "1",
    ]


def test_unsupported_dockerfiles_are_clear_errors(tmp_path: pathlib.Path) -> None:
    assert rootfs.dockerfile_steps("# c\nfrom x\nRUN a \\\n  b\n\nenv A=1") == [
        ("FROM", "x"),
        ("RUN", "a    b"),
        ("ENV", "A=1"),
    ]
    (tmp_path / "f").write_text("x")
    for body, match in [
        ("USER nobody", "USER is not supported"),
        ("COPY $SRC /x", "variables are not supported"),
        ("COPY ../outside /x", "not found"),
        ("COPY --from=other f /x", "unsupported"),
    ]:
        (tmp_path / "Dockerfile").write_text(f"FROM coding-agent-rl/base:latest\n{body}\n")
        with pytest.raises(ImageBuildError, match=match):
            rootfs.build("car-test/never:latest", tmp_path / "Dockerfile", tmp_path, "h")
    assert rootfs.find("car-test/never:latest") is None


async def test_rollout_paths_users_and_mounts(image: str, tmp_path: pathlib.Path) -> None:
    tool = tmp_path / "hello"
    tool.write_text("#!/bin/sh\necho hello from the host cache\n")
    tool.chmod(0o755)
    opts = {
        "network": "host",
        "writable": ["/etc", "/opt/coding-agent-rl", "/srv/app"],
        "mounts": {str(tool): "/opt/coding-agent-rl/bin/hello"},
    }
    async with create_sandbox("local", image, **opts) as sb:
        assert sb.mounts == {str(tool): "/opt/coding-agent-rl/bin/hello"}
        await sb.exec("useradd -m -U -s /bin/bash agent && chown -R agent: /srv/app", check=True)
        r = await sb.exec(
            "id -un; /opt/coding-agent-rl/bin/hello; touch new && git status --short",
            user="agent",
            check=True,
        )
        assert r.stdout.splitlines() == ["agent", "hello from the host cache", "?? new"]
        with pytest.raises(SandboxError, match="Read-only"):
            await sb.write_file("/opt/coding-agent-rl/bin/hello", b"replaced")
        with pytest.raises(SandboxError, match="Read-only"):
            await sb.write_file("/usr/bin/evil", b"x")
        devices = (await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1")).stdout.split()
        assert len(devices) > 1  # the agent's sandbox shares the host's network
    stored = rootfs.find(image)
    assert stored is not None
    assert "agent:" not in (stored.root / "etc/passwd").read_text()  # private copies only
    assert not (stored.root / "srv/app/new").exists()
    assert tool.read_text().startswith("#!/bin/sh")

    grading = sandbox_options_for("local", opts)
    assert grading["network"] == "none"
    async with create_sandbox("local", image, **grading) as sb:
        devices = (await sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1")).stdout.split()
    assert devices == ["lo"]

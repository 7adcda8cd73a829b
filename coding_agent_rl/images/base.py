"""Build the base image ``coding-agent-rl/base:latest`` without a registry.

Where no registry is reachable: debootstrap Debian bookworm (minbase) with what agents and
graders need (kept as the local backend's base, see :mod:`rootfs`), then ``docker import``.
``from_image`` builds FROM a registry image instead.
"""

from __future__ import annotations

import logging
import subprocess

from coding_agent_rl.images.common import (
    BASE_IMAGE,
    BASE_PACKAGES,
    ImageBuildError,
    image_exists,
)

log = logging.getLogger(__name__)


def _run(cmd: list[str], **kw) -> None:
    log.info("+ %s", " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise ImageBuildError(f"{cmd[0]} failed (exit {r.returncode}): {r.stderr[-2000:]}")


def build_base_image(
    name: str = BASE_IMAGE,
    *,
    rebuild: bool = False,
    from_image: str | None = None,
    mirror: str | None = None,
) -> str:
    """Build (or reuse) the base image; returns its name."""
    if not rebuild and image_exists(name):
        log.info("base image %s exists; reusing (pass --rebuild to rebuild)", name)
        return name
    if from_image:
        dockerfile = (
            f"FROM {from_image}\n"
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            f"--no-install-recommends {' '.join(BASE_PACKAGES)} && rm -rf /var/lib/apt/lists/*\n"
        )
        _run(["docker", "build", "-t", name, "-"], input=dockerfile)
        return name
    # The root filesystem stays in the local backend's store: built once, it serves both.
    from coding_agent_rl.images.rootfs import build_base

    rootfs = build_base(name, rebuild=rebuild, mirror=mirror).root
    with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
        imp = subprocess.run(
            ["docker", "import", "--change", 'CMD ["/bin/bash"]', "-", name],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
        )
    if imp.returncode != 0 or tar.returncode != 0:
        raise ImageBuildError(f"docker import failed: {imp.stderr[-2000:]}")
    return name

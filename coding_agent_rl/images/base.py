"""Build the base image ``coding-agent-rl/base:latest`` without a registry.

Where no registry is reachable: debootstrap Debian bookworm (minbase) with what agents and
graders need (kept as the local backend's base, see :mod:`rootfs`), then ``docker import``.
``from_image`` builds FROM a registry image instead.
"""

from __future__ import annotations

import logging
import pathlib
import subprocess

from coding_agent_rl.errors import CodingAgentRLError

log = logging.getLogger(__name__)

BASE_IMAGE = "coding-agent-rl/base:latest"
BASE_PACKAGES = [
    "python3",
    "python3-pytest",
    "git",
    "patch",
    "procps",
    "ca-certificates",
    "bash",
    "coreutils",
    "findutils",
    "sed",
    "grep",
    "diffutils",
    "less",
]
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ImageBuildError(CodingAgentRLError, RuntimeError):
    """An image could not be built (the message holds the builder's output)."""

    default_stage = "images"


def image_exists(name: str) -> bool:
    r = subprocess.run(["docker", "image", "inspect", name], capture_output=True)
    return r.returncode == 0


def apt_mirror(sources_dir: pathlib.Path = pathlib.Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line format)."""
    candidates = sorted((sources_dir / "sources.list.d").glob("*.sources"))
    for f in candidates:
        for line in f.read_text().splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if "security" not in uri:
                        return uri.rstrip("/")
    legacy = sources_dir / "sources.list"
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                uri = parts[2] if parts[1].startswith("[") else parts[1]
                return uri.rstrip("/")
    return DEFAULT_MIRROR


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
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(
        ["docker", "import", "--change", 'CMD ["/bin/bash"]', "-", name],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
    )
    tar.wait()
    if imp.returncode != 0 or tar.returncode != 0:
        raise ImageBuildError(f"docker import failed: {imp.stderr[-2000:]}")
    return name

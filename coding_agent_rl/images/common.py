"""What every image builder shares: the base image's name and packages, the build error, the
engine check and the apt mirror to build from."""

from __future__ import annotations

import pathlib
import subprocess

from coding_agent_rl.errors import CodingAgentRLError

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

"""Where the local (bubblewrap) backend's images live: unpacked root filesystems in a host store.

Layout under ``settings.cache_root / "rootfs"`` (default ``~/.cache/coding-agent-rl``), one
folder per image name (``/`` and ``:`` made ``_``)::

    rootfs/      what the sandbox shows, read-only (its writable paths are copied per sandbox)
    image.json   {"name", "hash", "env", "workdir"}: what Docker keeps as the image's config

:mod:`coding_agent_rl.images.rootfs` builds them.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re

from coding_agent_rl import settings


@dataclasses.dataclass(frozen=True)
class LocalImage:
    name: str
    root: pathlib.Path  # the unpacked root filesystem
    hash: str  # of what it was built from ("" when unknown)
    env: dict[str, str]
    workdir: str | None


def store() -> pathlib.Path:
    return settings.current().cache_root / "rootfs"


def image_dir(name: str) -> pathlib.Path:
    return store() / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def find(name: str) -> LocalImage | None:
    """The stored image ``name``, or None when it was never built (or its build failed)."""
    d = image_dir(name)
    try:
        meta = json.loads((d / "image.json").read_text())
    except (OSError, ValueError):
        return None
    root = d / "rootfs"
    if not (root / "usr").is_dir():
        return None
    return LocalImage(name, root, meta.get("hash", ""), meta.get("env") or {}, meta.get("workdir"))

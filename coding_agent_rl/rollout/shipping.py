"""A rollout's artifacts carried from a worker to the driver inside its outcome, within a budget.

A worker on another node writes the per-rollout artifacts (diff, agent log, test log) under its
own output folder; :func:`pack` reads them (the files the record names first, then the rest of
the rollout's folder) as ``{relative path: bytes}``, at most ``budget`` bytes in all. A file that
does not fit keeps its tail (logs are read from the end) and is listed as truncated. The driver
:func:`unpack` s them under its own output folder at the same relative paths, so the record's
``artifacts`` paths hold there as they would in process.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import Any


def artifact_paths(
    record: dict[str, Any], rollout_dir: pathlib.Path | None, root: pathlib.Path
) -> list[str]:
    """Relative paths to ship: those the record names, then every other file of the rollout."""
    named = [str(p) for p in (record.get("artifacts") or {}).values()]
    rest: list[str] = []
    if rollout_dir is not None and rollout_dir.is_dir():
        rest = sorted(str(p.relative_to(root)) for p in rollout_dir.rglob("*") if p.is_file())
    return list(dict.fromkeys([*named, *rest]))


def pack(
    root: pathlib.Path, paths: Iterable[str], budget: int
) -> tuple[dict[str, bytes], list[str]]:
    """The files under ``root`` (missing ones skipped), ``budget`` bytes in all; the paths cut."""
    files: dict[str, bytes] = {}
    truncated: list[str] = []
    left = max(0, budget)
    for rel in paths:
        path = root / rel
        if not _inside(root, path) or not path.is_file():
            continue
        size = path.stat().st_size
        if size <= left:
            files[rel] = path.read_bytes()
            left -= size
            continue
        truncated.append(rel)
        if left > 0:
            with path.open("rb") as f:
                f.seek(size - left)
                files[rel] = f.read(left)
            left = 0
    return files, truncated


def unpack(root: pathlib.Path, files: dict[str, bytes]) -> None:
    """Write shipped files under ``root``; a path that would leave ``root`` is refused."""
    for rel, data in files.items():
        path = root / rel
        if not _inside(root, path):
            raise ValueError(f"artifact path {rel!r} leaves the output folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _inside(root: pathlib.Path, path: pathlib.Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())

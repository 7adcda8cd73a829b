"""Lock files: ``uv.lock``, ``poetry.lock``, ``pdm.lock`` (TOML, read with tomllib; no ``uv``
needed). Their pins constrain every install; the project's own entry is left out. A package
locked at several versions (per-Python forks) is pinned where its markers select the image's."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

from coding_agent_rl.datasets.environment.model import DeclarationError, Declared, canonical

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

FILES = ("uv.lock", "poetry.lock", "pdm.lock")
_LOCAL = ("editable", "virtual", "directory", "path")


def marker_env(python: str) -> dict[str, str]:
    """The marker environment of the image's CPython ``python`` (X.Y) on Linux x86_64."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": "x86_64",
    }


def _selects(markers: list[str], python: str) -> bool:
    from packaging.markers import InvalidMarker, Marker

    if not markers:
        return True
    try:
        return any(Marker(m).evaluate(marker_env(python)) for m in markers)
    except InvalidMarker:
        return False


def _local(entry: dict[str, Any]) -> bool:
    source = entry.get("source") or {}
    if not isinstance(source, dict):
        return False
    return any(k in source for k in _LOCAL) or source.get("type") in ("directory", "file")


def read_lock(path: pathlib.Path, python: str) -> Declared:
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise DeclarationError(f"{path.name}: not valid TOML ({e})") from None
    found = Declared(sources=[path.name])
    versions: dict[str, list[dict[str, Any]]] = {}
    for entry in data.get("package") or []:
        if (
            isinstance(entry, dict)
            and entry.get("name")
            and entry.get("version")
            and not _local(entry)
        ):
            versions.setdefault(canonical(str(entry["name"])), []).append(entry)
    for name, entries in versions.items():
        chosen = [e for e in entries if _selects(e.get("resolution-markers") or [], python)]
        if len({str(e["version"]) for e in chosen}) == 1:
            found.pins[name] = (str(chosen[0]["version"]), path.name)
        else:
            found.notes.append(f"{path.name}: {name} locked at several versions: not pinned")
    requires = data.get("requires-python") or (data.get("metadata") or {}).get("python-versions")
    if isinstance(requires, str) and requires.strip() not in ("", "*"):
        found.requires_python.append((requires, path.name))
    return found


def read(repo: pathlib.Path, python: str = "3.11") -> Declared:
    for name in FILES:  # one lock: the first found
        if (repo / name).is_file():
            return read_lock(repo / name, python)
    return Declared()

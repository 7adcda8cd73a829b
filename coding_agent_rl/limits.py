"""Resource limits every sandbox gets by default: memory (swap = memory), pids, CPUs, writable
disk, open files. One set of names for backend options, ``--sandbox-option`` and a task's
``metadata.resources``; ``None`` turns a limit off; sizes are bytes or ``"512m"``, ``"4g"``...
The defaults and why: docs/modules/sandbox.md.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)
GIB = 1 << 30
RESOURCE_KEYS = ("memory", "cpus", "pids", "disk", "nofile")
# Least privilege: the capabilities root inside a sandbox keeps for our own set-up steps (chown,
# the agent's files, switching to the agent and test users, killing what they leave). The agent
# and the tests run as unprivileged users with none, under no-new-privileges.
ROOT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resolved limits (sizes in bytes); ``None`` = unlimited."""

    memory: int | None = 4 * GIB
    cpus: float | None = 2.0
    pids: int | None = 1024
    disk: int | None = 10 * GIB
    nofile: int | None = 16384

    def describe(self, name: str) -> str:
        """``"memory limit 4 GiB"``: how a breach of ``name`` is reported."""
        value = getattr(self, name)
        shown = human_size(value) if name in ("memory", "disk") and value else value
        return f"{name} limit {shown}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


DEFAULT_LIMITS = Limits()


def human_size(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def parse_size(value: Any, what: str) -> int | None:
    """Bytes from ``4294967296``, ``"4g"``, ``"512MiB"``; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a size like '4g' or a number of bytes, got {value!r}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        m = _SIZE.fullmatch(str(value))
        if not m:
            raise ValueError(f"{what}: expected a size like '4g' or '512m', got {value!r}")
        number, unit = float(m.group(1)), m.group(2).lower()
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{what}: must be positive, got {value!r}")
    return size


def _positive(value: Any, what: str, kind: type) -> Any:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value) == int(value)
    if not ok or value <= 0:
        raise ValueError(f"{what}: expected a positive {kind.__name__}, got {value!r}")
    return kind(value)


def resolve_limits(values: Mapping[str, Any], where: str = "sandbox option") -> Limits:
    """:class:`Limits` from option values (missing keys keep the default); raises ``ValueError``
    naming the bad key."""
    unknown = set(values) - set(RESOURCE_KEYS)
    if unknown:
        raise ValueError(
            f"{where}: unknown resource {sorted(unknown)[0]!r} (known: {', '.join(RESOURCE_KEYS)})"
        )
    base = DEFAULT_LIMITS
    get = lambda k: values.get(k, getattr(base, k))  # noqa: E731
    return Limits(
        memory=parse_size(get("memory"), f"{where} memory"),
        cpus=_positive(get("cpus"), f"{where} cpus", float),
        pids=_positive(get("pids"), f"{where} pids", int),
        disk=parse_size(get("disk"), f"{where} disk"),
        nofile=_positive(get("nofile"), f"{where} nofile", int),
    )


def parse_resources(obj: Any) -> dict[str, Any]:
    """A task's ``metadata.resources`` (an object with some of :data:`RESOURCE_KEYS`), checked;
    returns it as sandbox options. Raises ``ValueError`` naming the problem."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"resources must be an object with {', '.join(RESOURCE_KEYS)}")
    resolve_limits(obj, "resources")  # validates every value
    return dict(obj)


_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` once per process for ``key`` (a limit that cannot be enforced here)."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message)

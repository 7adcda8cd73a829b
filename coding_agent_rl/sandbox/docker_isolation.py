"""What makes a Docker sandbox safe to hand to a hostile agent: limits, privileges, a capped disk.

Limits (:mod:`limits`), least privilege (a few capabilities for our root-side set-up,
``no-new-privileges``, unprivileged agent and test users) and the paths a sandbox writes on a
:class:`~coding_agent_rl.sandbox.disk.CappedDisk`, the writable layer watched as a backstop.
Details: docs/modules/sandbox.md.
"""

from __future__ import annotations

import posixpath
import subprocess
import time
from typing import Any

import docker.types

from coding_agent_rl.limits import ROOT_CAPS, Limits, human_size, warn_once
from coding_agent_rl.sandbox import cgroups
from coding_agent_rl.sandbox.disk import CappedDisk, unavailable_reason

DEFAULT_DISK_PATHS = ("/tmp", "/var/tmp", "/run/lock", "/home")
UPPER_CHECK_S = 15.0  # how often the writable layer (the backstop) is measured


def disk_paths(extra: list[str] | None) -> list[str]:
    """The default paths plus ``extra``, each once, none nested under another (a nested path is
    on the disk already, through its parent)."""
    paths = sorted({posixpath.normpath(p) for p in (*DEFAULT_DISK_PATHS, *(extra or ()))})
    return [p for p in paths if not any(p.startswith(q.rstrip("/") + "/") for q in paths)]


def host_config_kwargs(limits: Limits, *, hardened: bool) -> dict[str, Any]:
    """``create_host_config`` keyword arguments for ``limits`` and the privilege policy."""
    kw: dict[str, Any] = {
        "nano_cpus": int(limits.cpus * 1e9) if limits.cpus else None,
        "mem_limit": limits.memory,
        "memswap_limit": limits.memory,  # swap = memory: no swap on top of the limit
        "pids_limit": limits.pids,
    }
    if limits.nofile:
        kw["ulimits"] = [docker.types.Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile)]
    if hardened:
        kw["cap_drop"] = ["ALL"]
        kw["cap_add"] = list(ROOT_CAPS)
        kw["security_opt"] = ["no-new-privileges"]
    return kw


def make_disk(run_id: str, limits: Limits, local: bool) -> CappedDisk | None:
    """A capped disk for one sandbox, or None (no disk limit, or none possible here: warned)."""
    if not limits.disk:
        return None
    why = None if local else "the Docker engine is on another machine"
    why = why or unavailable_reason()
    if why:
        warn_once(why, f"disk limit not enforced ({why}); the other limits still apply")
        return None
    return CappedDisk(run_id, limits.disk).create()


def disk_mounts(disk: CappedDisk, paths: list[str], labels: dict[str, str]) -> list[Any]:
    """One volume per path, bound to a folder of ``disk`` (the engine copies the image's content
    in at creation, as for any new volume)."""
    mounts = []
    for i, path in enumerate(paths):
        folder = disk.subdir(f"v{i}")
        mounts.append(
            docker.types.Mount(
                path,
                None,
                type="volume",
                labels=labels,
                driver_config=docker.types.DriverConfig(
                    "local", {"type": "none", "o": "bind", "device": str(folder)}
                ),
            )
        )
    return mounts


def _du(path: str) -> int:
    r = subprocess.run(["du", "-sxb", path], capture_output=True, text=True, timeout=120)
    head = r.stdout.split()
    return int(head[0]) if head and head[0].isdigit() else 0


class Watch:
    """The breach checks of one container (blocking: run on the engine's thread pool)."""

    def __init__(self, limits: Limits, disk: CappedDisk | None, pid: int | None, upper: str | None):
        self.limits = limits
        self.disk = disk
        self.pid = pid  # the container's init on this host (None: the engine is elsewhere)
        self.upper = upper  # the overlay writable layer's folder on this host, if known
        self._upper_at = 0.0
        self._upper_full = False

    def on_host(self) -> bool:
        return self.pid is not None

    def host_breaches(self) -> list[str]:
        """Counters and free space read on this host."""
        out = cgroups.breaches(cgroups.counters_of_pid(self.pid or 0), self.limits)
        if self.disk is not None and self.disk.full():
            out.append(f"{self.limits.describe('disk')} reached (the writable disk is full)")
        if self.limits.disk and self.upper:
            if time.monotonic() - self._upper_at >= UPPER_CHECK_S:
                self._upper_at = time.monotonic()
                self._upper_full = _du(self.upper) > self.limits.disk
            if self._upper_full:
                out.append(
                    f"{self.limits.describe('disk')} exceeded by the container's writable layer "
                    f"(over {human_size(self.limits.disk)})"
                )
        return out

    def from_script(self, out: str) -> list[str]:
        """Breaches from :data:`cgroups.IN_SANDBOX_SCRIPT`'s output (engine elsewhere)."""
        return cgroups.breaches(cgroups.parse_script_output(out), self.limits)

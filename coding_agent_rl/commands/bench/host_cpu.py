"""Host CPU-seconds of this process and of the container engine (``dockerd``, ``containerd``
and the live shims: their own user+system time only, since a shim's reaped children are the
containers' processes), read from ``/proc``: what a batch costs the host outside the sandboxes
(the agent CLI and the tests are not counted; a shim that exited meanwhile is missed). The
engine's figure is host-wide: it counts the work for every container on that engine, ours or
not, so it is a measured cost of a batch only where nothing else uses the engine."""

from __future__ import annotations

import os
import pathlib

ENGINE = ("dockerd", "containerd")


def _proc_cpu_s(pid: str) -> float:
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime: fields 14-15 (1-based) of the whole line
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def engine_cpu_s() -> float:
    """CPU-seconds the engine's live processes on this host have used so far."""
    total = 0.0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if name in ENGINE or name.startswith("containerd-shim"):
            total += _proc_cpu_s(entry.name)
    return total


def own_cpu_s() -> float:
    """This process's CPU-seconds, its threads and reaped children included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def host_busy_cpu_s() -> float:
    """CPU-seconds every process on this host has used so far (``/proc/stat``: all but idle and
    iowait). Host-wide: a measured cost of one step only where nothing else runs meanwhile."""
    try:
        fields = pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(x) for x in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # less idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")

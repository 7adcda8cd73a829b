"""Control-group counters that tell a limit was hit, on cgroup v1 and v2.

The kernel counts what a limit refused: ``oom_kill`` in ``memory.oom_control`` (v1) /
``memory.events`` (v2) and ``max`` in ``pids.events`` (both). They are read from the host
(``/proc/PID/cgroup`` names the group of a sandbox's process) when the engine runs here, or
from inside the sandbox (:data:`IN_SANDBOX_SCRIPT`) when it does not. :class:`OwnCgroup` makes a
group for backends without an engine (the local bubblewrap backend), with the same limits.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import uuid

from coding_agent_rl.limits import Limits

ROOT = pathlib.Path("/sys/fs/cgroup")
# Inside a container the group is mounted at the root of each hierarchy.
IN_SANDBOX_SCRIPT = (
    "for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do "
    '[ -r "$f" ] && { echo "== memory"; cat "$f"; break; }; done; '
    "for f in /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events; do "
    '[ -r "$f" ] && { echo "== pids"; cat "$f"; break; }; done; true'
)


def unified() -> bool:
    """cgroup v2 mounted at /sys/fs/cgroup."""
    return (ROOT / "cgroup.controllers").exists()


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


def parse_counters(memory_text: str, pids_text: str) -> dict[str, int]:
    """``{"oom_kill": N, "pids_max": N}`` from the two files' text (v1 or v2)."""
    return {"oom_kill": _field(memory_text, "oom_kill"), "pids_max": _field(pids_text, "max")}


def parse_script_output(out: str) -> dict[str, int]:
    """Counters from :data:`IN_SANDBOX_SCRIPT`'s output."""
    parts: dict[str, str] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("== "):
            current = line[3:].strip()
            parts[current] = ""
        elif current:
            parts[current] += line + "\n"
    return parse_counters(parts.get("memory", ""), parts.get("pids", ""))


def _group_dirs(pid: int) -> dict[str, pathlib.Path]:
    """Controller -> folder of ``pid``'s group ("" -> the v2 folder)."""
    dirs: dict[str, pathlib.Path] = {}
    for line in pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "" and unified():
            dirs[""] = ROOT / rel
        for c in controllers.split(","):
            if c in ("memory", "pids", "cpuacct"):
                dirs[c] = ROOT / c / rel
    return dirs


def _read(path: pathlib.Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text()
    return ""


def _read_dirs(dirs: dict[str, pathlib.Path]) -> dict[str, int]:
    if "" in dirs:
        return parse_counters(_read(dirs[""] / "memory.events"), _read(dirs[""] / "pids.events"))
    memory = _read(dirs["memory"] / "memory.oom_control") if "memory" in dirs else ""
    pids = _read(dirs["pids"] / "pids.events") if "pids" in dirs else ""
    return parse_counters(memory, pids)


def counters_of_pid(pid: int) -> dict[str, int] | None:
    """The counters of ``pid``'s group, read on this host; None when the process is gone."""
    try:
        dirs = _group_dirs(pid)
    except (OSError, ValueError):
        return None
    return _read_dirs(dirs)


def cpu_seconds_of_dirs(dirs: dict[str, pathlib.Path]) -> float | None:
    """CPU time used by every process that was ever in the group (v2 ``cpu.stat`` usage_usec,
    v1 ``cpuacct.usage``); None when not accounted."""
    if "" in dirs:
        text = _read(dirs[""] / "cpu.stat")
        return _field(text, "usage_usec") / 1e6 if "usage_usec" in text else None
    for c in ("cpuacct", "cpu"):  # "cpu" holds it where the two are mounted together
        text = _read(dirs[c] / "cpuacct.usage").strip() if c in dirs else ""
        if text.isdigit():
            return int(text) / 1e9
    return None


def cpu_seconds_of_pid(pid: int) -> float | None:
    """CPU seconds of ``pid``'s group, read on this host; None when gone or not accounted."""
    try:
        dirs = _group_dirs(pid)
    except (OSError, ValueError):
        return None
    return cpu_seconds_of_dirs(dirs)


def breaches(counters: dict[str, int] | None, limits: Limits) -> list[str]:
    """One line per limit the counters show was hit, naming the limit."""
    if not counters:
        return []
    out = []
    if counters.get("oom_kill") and limits.memory:
        out.append(f"{limits.describe('memory')} exceeded ({counters['oom_kill']} OOM kill(s))")
    if counters.get("pids_max") and limits.pids:
        out.append(f"{limits.describe('pids')} reached ({counters['pids_max']} fork(s) refused)")
    return out


class OwnCgroup:
    """A control group of our own with ``limits`` (memory = swap, pids, cpus) that accounts its
    CPU time; needs root.

    A process joins by writing its pid to ``cgroup.procs`` in each of :attr:`dirs`
    (see :meth:`coding_agent_rl.sandbox.local_limits.LocalLimits.prefix`).
    """

    def __init__(self, limits: Limits):
        self.limits = limits
        self.name = f"coding-agent-rl/{uuid.uuid4().hex[:12]}"
        self.dirs: dict[str, pathlib.Path] = {}

    def create(self) -> OwnCgroup:
        lim = self.limits
        if unified():
            d = ROOT / self.name
            d.mkdir(parents=True)
            parent = d.parent / "cgroup.subtree_control"
            with contextlib.suppress(OSError):
                parent.write_text("+memory +pids +cpu")
            self.dirs = {"": d}
            if lim.memory:
                (d / "memory.max").write_text(str(lim.memory))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
            if lim.pids:
                (d / "pids.max").write_text(str(lim.pids))
            if lim.cpus:
                (d / "cpu.max").write_text(f"{int(lim.cpus * 100000)} 100000")
            return self
        for c in ("memory", "pids", "cpu", "cpuacct"):
            if (
                c == "cpuacct"
                and "cpu" in self.dirs
                and (ROOT / c).resolve() == (ROOT / "cpu").resolve()
            ):
                continue  # mounted together with cpu: that group accounts already
            if (ROOT / c).is_dir():
                d = ROOT / c / self.name
                d.mkdir(parents=True)
                self.dirs[c] = d
        if lim.memory and "memory" in self.dirs:
            (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(lim.memory))
            with contextlib.suppress(OSError):  # only with swap accounting
                (self.dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(lim.memory))
        if lim.pids and "pids" in self.dirs:
            (self.dirs["pids"] / "pids.max").write_text(str(lim.pids))
        if lim.cpus and "cpu" in self.dirs:
            (self.dirs["cpu"] / "cpu.cfs_period_us").write_text("100000")
            (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(int(lim.cpus * 100000)))
        return self

    def counters(self) -> dict[str, int]:
        return _read_dirs(self.dirs)

    def destroy(self) -> None:
        """Remove the (empty) groups; call after every member is gone."""
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                d.rmdir()
        self.dirs = {}


def own_cgroup_reason() -> str | None:
    """None when :class:`OwnCgroup` can be made here, else why not."""
    if os.geteuid() != 0:
        return "own control groups need root"
    if not ROOT.is_dir():
        return "no /sys/fs/cgroup"
    if not unified() and not (ROOT / "memory").is_dir():
        return "no memory controller in /sys/fs/cgroup"
    return None

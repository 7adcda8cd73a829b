"""Who owns a sandbox, and whether that owner is gone (so the sandbox is an orphan).

An owner is host, boot id, pid namespace, pid and the process's start time; it is gone when it
ran on this host and the host rebooted, the pid is dead or was recycled. Owners on other hosts or
pid namespaces, and sandboxes without an owner, are never judged. Details:
docs/modules/sandbox.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import socket
from typing import Literal

PREFIX = "coding-agent-rl.owner."
LABEL_HOST = PREFIX + "host"
LABEL_BOOT = PREFIX + "boot"
LABEL_PIDNS = PREFIX + "pidns"
LABEL_PID = PREFIX + "pid"
LABEL_START = PREFIX + "start"

State = Literal["alive", "gone", "elsewhere"]


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot); None when there is no such
    process, or only its corpse (a zombie that its parent has not waited for yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) is in parentheses and may hold spaces: count from the last ")".
    fields = stat.rsplit(b")", 1)[-1].split()
    try:
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[19])  # field 22 overall (state, field 3, is fields[0])
    except (IndexError, ValueError):
        return None


def boot_id() -> str:
    with contextlib.suppress(OSError):
        return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def pid_namespace() -> str:
    """This process's pid namespace (``pid:[INODE]``), "" when unknown."""
    with contextlib.suppress(OSError):
        return os.readlink("/proc/self/ns/pid")
    return ""


@dataclasses.dataclass(frozen=True)
class Owner:
    host: str
    boot: str
    pid: int
    start: int
    pidns: str = ""

    def labels(self) -> dict[str, str]:
        return {
            LABEL_HOST: self.host,
            LABEL_BOOT: self.boot,
            LABEL_PIDNS: self.pidns,
            LABEL_PID: str(self.pid),
            LABEL_START: str(self.start),
        }

    @classmethod
    def from_labels(cls, labels: dict[str, str] | None) -> Owner | None:
        """The owner recorded in ``labels``; None when there is none (or it is unreadable)."""
        labels = labels or {}
        try:
            return cls(
                labels[LABEL_HOST],
                labels.get(LABEL_BOOT, ""),
                int(labels[LABEL_PID]),
                int(labels[LABEL_START]),
                labels.get(LABEL_PIDNS, ""),
            )
        except (KeyError, ValueError):
            return None

    def state(self) -> State:
        """``alive``, ``gone`` (an orphan's owner), or ``elsewhere`` (another host or pid
        namespace: unknown from here)."""
        if self.host != socket.gethostname():
            return "elsewhere"
        if self.boot and self.boot != boot_id():
            return "gone"  # the host rebooted: every process of the old boot is gone
        if self.pidns and self.pidns != pid_namespace():
            return "elsewhere"  # its pids are another namespace's
        return "alive" if start_time(self.pid) == self.start else "gone"

    def describe(self) -> str:
        return f"{self.host}:{self.pid}"


_current: tuple[int, Owner] | None = None


def current() -> Owner:
    """This process (computed again after a fork)."""
    global _current
    pid = os.getpid()
    if _current is None or _current[0] != pid:
        me = Owner(socket.gethostname(), boot_id(), pid, start_time(pid) or 0, pid_namespace())
        _current = (pid, me)
    return _current[1]


def is_orphan(labels: dict[str, str] | None) -> bool:
    """Whether the owner recorded in ``labels`` is gone (no owner recorded: False)."""
    owner = Owner.from_labels(labels)
    return owner is not None and owner.state() == "gone"


OWNER_FILE = "owner.json"


def write_file(folder: pathlib.Path, **extra: object) -> None:
    """Record this process as the owner of ``folder`` (plus ``extra`` facts for the reaper)."""
    (folder / OWNER_FILE).write_text(json.dumps({**current().labels(), **extra}))


def read_file(folder: pathlib.Path) -> dict[str, object] | None:
    """What :func:`write_file` recorded in ``folder``; None when nothing (readable) is there."""
    try:
        data = json.loads((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def file_is_orphan(folder: pathlib.Path) -> bool:
    data = read_file(folder)
    if data is None:
        return False
    return is_orphan({k: str(v) for k, v in data.items() if k.startswith(PREFIX)})

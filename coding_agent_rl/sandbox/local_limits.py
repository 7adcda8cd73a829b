"""Resource limits for the local (bubblewrap) backend, which has no engine to set them.

- memory (swap = memory), pids, CPUs: a control group of our own
  (:class:`~coding_agent_rl.sandbox.cgroups.OwnCgroup`) that the holder and every exec enter
  before their first instruction (:meth:`LocalLimits.prefix`);
- open files: ``ulimit -n`` in the same prefix;
- writable disk: the sandbox's private copies live on a
  :class:`~coding_agent_rl.sandbox.disk.CappedDisk` instead of a plain temp dir.

Where a piece is unavailable (no root, no loop devices, no memory controller) it is skipped with
one warning; the others still apply.
"""

from __future__ import annotations

import pathlib
import shlex
import tempfile

from coding_agent_rl.limits import Limits, warn_once
from coding_agent_rl.sandbox import cgroups
from coding_agent_rl.sandbox.disk import CappedDisk, unavailable_reason


class LocalLimits:
    """The limits of one local sandbox; blocking methods (run them on a thread)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.cgroup: cgroups.OwnCgroup | None = None
        self.disk: CappedDisk | None = None

    def prepare(self) -> pathlib.Path:
        """Create the group and the disk; returns the folder for the private copies."""
        lim = self.limits
        if lim.memory or lim.pids or lim.cpus:
            why = cgroups.own_cgroup_reason()
            if why:
                warn_once(why, f"local sandbox: memory/pids/cpus limits not enforced ({why})")
            else:
                self.cgroup = cgroups.OwnCgroup(lim).create()
        if lim.disk:
            why = unavailable_reason()
            if why:
                warn_once(why, f"local sandbox: disk limit not enforced ({why})")
            else:
                self.disk = CappedDisk("local", lim.disk).create()
                store = self.disk.mnt / self.disk.dir.name  # its name: the sandbox's id
                store.mkdir()
                return store
        return pathlib.Path(tempfile.mkdtemp(prefix="coding-agent-rl-local-"))

    def prefix(self) -> list[str]:
        """argv prefix: enter the group, set the open-files limit, then ``exec`` the command."""
        steps = ""
        if self.cgroup is not None:
            steps += "".join(
                f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))} && "
                for d in self.cgroup.dirs.values()
            )
        if self.limits.nofile:
            steps += f"ulimit -n {int(self.limits.nofile)} && "
        return ["sh", "-c", f'{steps}exec "$@"', "sh"] if steps else []

    def breaches(self) -> list[str]:
        out = cgroups.breaches(self.cgroup.counters(), self.limits) if self.cgroup else []
        if self.disk is not None and self.disk.full():
            out.append(f"{self.limits.describe('disk')} reached (the writable disk is full)")
        return out

    def destroy(self) -> None:
        """After every process of the sandbox is gone."""
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None
        if self.disk is not None:
            self.disk.destroy()
            self.disk = None

"""A writable disk with a hard size cap, for engines without storage quotas.

A :class:`CappedDisk` is a sparse ext4 file loop-mounted ``nosuid,nodev`` under
``$CODING_AGENT_RL_DISK_DIR``; a sandbox's writable paths live on it, so writing past the cap is
ENOSPC, not a full host. Needs root, ``mkfs.ext4`` and loop devices (:func:`unavailable_reason`).
Details: docs/modules/sandbox.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import re
import shutil
import subprocess
import uuid

from coding_agent_rl import settings
from coding_agent_rl.sandbox import owner
from coding_agent_rl.sandbox.base import SandboxCreateError

FULL_BELOW_BYTES = 2 << 20  # "full": less than this is left (ENOSPC is near or was hit)


def disk_dir() -> pathlib.Path:
    """Where capped disks live (``settings.disk_dir``)."""
    return settings.current().disk_dir


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when capped disks can be made here, else why not (checked once per process)."""
    if os.geteuid() != 0:
        return "capped disks need root (loop mounts)"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install e2fsprogs mount)"
    if not (os.path.exists("/dev/loop-control") or os.path.exists("/dev/loop0")):
        return "no loop devices (/dev/loop-control)"
    return None


def _run(*argv: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SandboxCreateError(f"{' '.join(argv)}: {(r.stderr or r.stdout).strip()[-300:]}")


class CappedDisk:
    """One loop-mounted ext4 file system of ``size`` bytes; blocking methods (run them on a thread)."""

    def __init__(self, run_id: str, size: int):
        self.size = size
        self.dir = disk_dir() / _safe(run_id) / uuid.uuid4().hex[:12]
        self.image = self.dir / "disk.img"
        self.mnt = self.dir / "mnt"
        self._mounted = False

    def create(self) -> CappedDisk:
        self.mnt.mkdir(parents=True)
        owner.write_file(self.dir)  # before anything that needs cleaning up exists
        with open(self.image, "wb") as f:
            f.truncate(self.size)  # sparse: costs only what is written
        _run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-E", "nodiscard",
             str(self.image))  # fmt: skip
        _run("mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.mnt))
        self._mounted = True
        (self.mnt / "lost+found").rmdir()
        return self

    def subdir(self, name: str) -> pathlib.Path:
        """An empty folder on the disk (Docker copies the image's content into it)."""
        path = self.mnt / _safe(name)
        path.mkdir(mode=0o755)
        return path

    def free(self) -> tuple[int, int]:
        """(bytes, inodes) still free."""
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize, st.f_favail

    def full(self) -> bool:
        """Whether the cap was reached: (almost) no byte or no inode left."""
        if not self._mounted:
            return False
        try:
            free_bytes, free_inodes = self.free()
        except OSError:
            return False
        return free_bytes < FULL_BELOW_BYTES or free_inodes == 0

    def destroy(self) -> None:
        """Unmount (lazily, should a process still hold it) and delete; idempotent."""
        if self._mounted or os.path.ismount(self.mnt):
            _umount(self.mnt)
        self._mounted = False
        shutil.rmtree(self.dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.dir.parent.rmdir()  # the run's folder, once its last disk is gone


def _umount(path: pathlib.Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


def _remove(disk: pathlib.Path) -> None:
    mnt = disk / "mnt"
    if os.path.ismount(mnt):
        _umount(mnt)
    shutil.rmtree(disk, ignore_errors=True)


def gc(run_id: str | None = None) -> int:
    """Unmount and delete the disks of ``run_id`` (every run's when None); returns how many."""
    root = disk_dir()
    runs = [root / _safe(run_id)] if run_id is not None else sorted(root.glob("*"))
    removed = 0
    for run in runs:
        for disk in sorted(run.glob("*")) if run.is_dir() else []:
            _remove(disk)
            removed += 1
        with contextlib.suppress(OSError):
            run.rmdir()
    return removed


def reap_orphans() -> int:
    """Unmount and delete the disks whose owner process is gone (of any run); how many."""
    root = disk_dir()
    removed = 0
    for run in sorted(root.glob("*")) if root.is_dir() else []:
        for disk in sorted(run.glob("*")) if run.is_dir() else []:
            if owner.file_is_orphan(disk):
                _remove(disk)
                removed += 1
        with contextlib.suppress(OSError):
            run.rmdir()  # only once empty
    return removed

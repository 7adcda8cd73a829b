"""What a local (bubblewrap) sandbox leaves when its owner process is killed, and its removal.

The sandbox's processes do not outlive the owner: the holder (the pid namespace's init) and
every exec run under bwrap's ``--die-with-parent`` (``PR_SET_PDEATHSIG``), and when the
namespace's init dies the kernel kills every member. What stays behind is on the file system: the
private copies (a temp folder, or a folder on a capped disk: a loop mount) and the control group.
Each sandbox therefore records its owner and those paths in
``$TMPDIR/coding-agent-rl-sandbox-owners/<sandbox id>/owner.json``; :func:`reap_orphans` (every
runtime start on the local backend) removes them for owners that are gone
(:mod:`coding_agent_rl.sandbox.owner`), then the capped disks of such owners.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import tempfile

from coding_agent_rl.sandbox import disk, owner


def owners_dir() -> pathlib.Path:
    return pathlib.Path(tempfile.gettempdir()) / "coding-agent-rl-sandbox-owners"


def record(sandbox_id: str, store: pathlib.Path, cgroups: list[pathlib.Path]) -> None:
    """Blocking: this process owns sandbox ``sandbox_id`` (its copies in ``store``)."""
    folder = owners_dir() / sandbox_id
    folder.mkdir(parents=True, exist_ok=True)
    owner.write_file(folder, store=str(store), cgroups=[str(d) for d in cgroups])


def forget(sandbox_id: str) -> None:
    """Blocking: the sandbox was destroyed by its owner."""
    if sandbox_id:
        shutil.rmtree(owners_dir() / sandbox_id, ignore_errors=True)


def _remove_cgroup(path: pathlib.Path) -> None:
    # Its members died with the namespace; should one remain (it escaped the pid namespace?),
    # it goes too: the group was made for this sandbox only.
    with contextlib.suppress(OSError, ValueError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(OSError):
        path.rmdir()


def reap_orphans() -> dict[str, int]:
    """Blocking: remove the leftovers of local sandboxes whose owner is gone; how many."""
    root = owners_dir()
    sandboxes = 0
    for folder in sorted(root.glob("*")) if root.is_dir() else []:
        if not owner.file_is_orphan(folder):
            continue
        facts = owner.read_file(folder) or {}
        groups = facts.get("cgroups")
        for path in groups if isinstance(groups, list) else []:
            _remove_cgroup(pathlib.Path(str(path)))
        store = facts.get("store")
        if isinstance(store, str) and store:
            shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        sandboxes += 1
    return {"sandboxes": sandboxes, "disks": disk.reap_orphans()}

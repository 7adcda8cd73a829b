"""What a local (bubblewrap) sandbox sees: its filesystem view and its users.

The source tree (``/`` for ``image="host"``, else an unpacked root filesystem) is shown
read-only, one bind per top-level entry on bwrap's own root, so directories that do not exist in
the source (``/workspace``) can still be mount points. The private directories are copies kept
in a host temp dir. In host mode the host's ``/tmp``, ``/root``, ``/home`` start empty and
``/run`` (the docker socket, among others) and the engines' state are never shown.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import posixpath
import shutil
import subprocess
import time

from coding_agent_rl.sandbox.base import ImageNotFound
from coding_agent_rl.sandbox.disk import disk_dir

PRIVATE_DIRS = ("/tmp", "/root", "/home", "/workspace")
_NEVER_SHOWN = {"proc", "dev", "sys", "run", "tmp", "root", "home", "workspace", "lost+found"}
# Host mode: container engines' state. Their overlay mounts come and go while other containers
# start and stop, which makes a recursive bind of /var fail at random; nothing there is needed.
_HOST_HIDDEN = ("/var/lib/docker", "/var/lib/containerd")


def bwrap_reason() -> str | None:
    """None when bubblewrap can run sandboxes here, else why not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if os.geteuid() != 0:
        return "the local sandbox needs root (it joins namespaces with nsenter and bwrap --pidns)"
    err = ""
    for attempt in range(3):  # a busy host can fail one namespace creation: not "unavailable"
        r = subprocess.run(
            ["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "true"],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            return None
        err = r.stderr.strip()
        time.sleep(0.2 * (attempt + 1))
    return f"bwrap does not work here: {err}"


def private_dirs(writable: list[str] | None) -> list[str]:
    """The sandbox paths that are private writable copies, parents before children."""
    extra = [posixpath.normpath(p) for p in writable or []]
    for p in extra:
        if not posixpath.isabs(p) or p == "/":
            raise ValueError(f"option 'writable' of the local sandbox: bad path {p!r}")
    return sorted(set(PRIVATE_DIRS) | set(extra), key=lambda p: (p.count("/"), p))


def check_root(root: pathlib.Path) -> None:
    if not (root / "usr").is_dir():
        raise ImageNotFound(
            f"local sandbox image {str(root)!r} is neither in the local image store nor an "
            "unpacked root filesystem; build it with `coding-agent-rl images build --dataset FILE "
            "--backend local` (the base: `images base --backend local`), or unpack one with: "
            "mkdir -p DIR && docker export $(docker create IMAGE) | tar -x -C DIR "
            "(or use image='host')"
        )


def build_view(
    root: pathlib.Path,
    *,
    host_mode: bool,
    private: list[str],
    workspace: str | None,
    store: pathlib.Path,
    binds: dict[str, str] | None = None,
    seeds: dict[str, str] | None = None,
) -> list[str]:
    """Blocking: copy the private directories into ``store``; returns bwrap's mount arguments.

    ``binds``: host path -> sandbox path, bound read-only last (over private directories too).
    ``seeds``: sandbox path -> host directory its private copy starts from (a snapshot's).
    """
    # Private paths and bind targets are left out of the read-only view; a nested one (``/opt/x``)
    # makes its parents directories of their own, so its mount point can be created whether or
    # not the source has it.
    binds = binds or {}
    for target in binds.values():
        if not posixpath.isabs(target) or posixpath.normpath(target) == "/":
            raise ValueError(f"option 'mounts' of the local sandbox: bad path {target!r}")
    hidden = {f"/{name}" for name in _NEVER_SHOWN} | set(private)
    hidden |= {posixpath.normpath(t) for t in binds.values()}
    if host_mode:
        # ... and the capped disks, which hold every local sandbox's private copies: one
        # sandbox must not read another's workdir (a sibling rollout's solution).
        hidden |= {*_HOST_HIDDEN, str(disk_dir())}
    mounts = _ro_binds(root, "/", hidden)
    mounts += ["--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/run"]
    mounts += ["--ro-bind-try", "/sys", "/sys"]
    for path, host in private_copies(private, store).items():
        host.mkdir()
        seed = pathlib.Path(workspace) if path == "/workspace" and workspace else None
        source = root / path.lstrip("/")
        if seeds and path in seeds:
            seed = pathlib.Path(seeds[path])
        elif seed is None and source.is_dir() and not (host_mode and path in PRIVATE_DIRS):
            seed = source
        if seed is not None:
            subprocess.run(
                ["cp", "-a", "--reflink=auto", f"{seed}/.", str(host)],
                check=True,
                capture_output=True,
            )
        if path == "/tmp":
            host.chmod(0o1777)
        mounts += ["--bind", str(host), path]
    for bound, target in binds.items():
        # --dir: the parents get mode 0755 (bwrap makes missing ones 0700, closed to non-root).
        parent = posixpath.dirname(posixpath.normpath(target))
        mounts += ["--dir", parent, "--ro-bind", bound, posixpath.normpath(target)]
    return mounts


def private_copies(private: list[str], store: pathlib.Path) -> dict[str, pathlib.Path]:
    """Sandbox path -> the host directory holding its private copy."""
    return {path: store / f"{i}{path.replace('/', '_')}" for i, path in enumerate(private)}


def host_path(root: pathlib.Path, copies: dict[str, pathlib.Path], path: str) -> pathlib.Path:
    """The host file a sandbox shows at ``path``: in the deepest private copy above it, else
    in the source tree (read-only binds and bwrap's own mounts are not resolved)."""
    for private in sorted(copies, key=len, reverse=True):
        if path == private or path.startswith(private + "/"):
            return copies[private] / posixpath.relpath(path, private)
    return root / path.lstrip("/")


def _ro_binds(src: pathlib.Path, dest: str, hidden: set[str]) -> list[str]:
    """Read-only binds of ``src``'s entries at ``dest``, leaving out the ``hidden`` paths.

    A directory with a hidden path below it is recreated and its entries bound one by one
    (a bind is recursive and cannot exclude anything).
    """
    args: list[str] = []
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        path = posixpath.join(dest, entry.name)
        if path in hidden:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), path]
        elif entry.is_dir() and any(h.startswith(path + "/") for h in hidden):
            args += ["--dir", path, *_ro_binds(pathlib.Path(entry.path), path, hidden)]
        else:
            args += ["--ro-bind", entry.path, path]
    return args


def lookup_user(passwd: pathlib.Path, user: str) -> tuple[int, int, str] | None:
    """(uid, gid, home) of ``user`` (a name, ``uid`` or ``uid:gid``) in the sandbox's passwd
    file (its host path: users created in a private ``/etc`` are found)."""
    if user.replace(":", "").isdigit():
        uid, _, gid = user.partition(":")
        return int(uid), int(gid or uid), "/"
    with contextlib.suppress(OSError):
        for line in passwd.read_text().splitlines():
            f = line.split(":")
            if len(f) >= 6 and f[0] == user:
                return int(f[2]), int(f[3]), f[5]
    return None

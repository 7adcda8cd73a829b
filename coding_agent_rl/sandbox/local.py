"""Local backend: bubblewrap, for machines without a container engine (needs root).

Root filesystems are shown read-only with private writable copies (:mod:`local_view`); limits
come from our own control group and a capped disk (:mod:`local_limits`). One long-lived bwrap
holder owns the namespaces and every exec joins it. Details: docs/modules/sandbox.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import posixpath
import shlex
import shutil
import signal
import subprocess
import time
from typing import Any

from coding_agent_rl.limits import (
    DEFAULT_LIMITS,
    RESOURCE_KEYS,
    ROOT_CAPS,
    Limits,
    resolve_limits,
)
from coding_agent_rl.sandbox import cgroups, local_orphans, rootfs
from coding_agent_rl.sandbox.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    NetworkUnsupported,
    Sandbox,
    SandboxCreateError,
    SandboxError,
    SandboxFileNotFound,
)
from coding_agent_rl.sandbox.capture import CappedBuffer
from coding_agent_rl.sandbox.local_limits import LocalLimits
from coding_agent_rl.sandbox.local_view import (
    build_view,
    bwrap_reason,
    check_root,
    host_path,
    lookup_user,
    private_copies,
    private_dirs,
)
from coding_agent_rl.sandbox.netns import listen_in_netns
from coding_agent_rl.sandbox.options import parse_options
from coding_agent_rl.sandbox.reaper import TOKEN_ENV, kill_tagged_here, new_token

__all__ = ["LocalOptions", "LocalSandbox", "bwrap_reason"]

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ROOT_USERS = ("root", "0", "0:0")
_IO_GRACE_S = 2.0


_D = DEFAULT_LIMITS


@dataclasses.dataclass
class LocalOptions:
    network: str = "none"  # "none" | "host"
    memory: str | int | None = _D.memory  # limits: see limits.py (None = unlimited)
    cpus: float | None = _D.cpus
    pids: int | None = _D.pids
    disk: str | int | None = _D.disk
    nofile: int | None = _D.nofile
    workspace: str | None = None  # host directory copied to /workspace
    writable: list[str] | None = None  # more sandbox paths to copy from the source, writable
    workdir: str | None = None  # default cwd of execs: the image's WORKDIR, else /workspace
    env: dict[str, str] | None = None  # over the image's ENV
    mounts: dict[str, str] | None = None  # read-only binds, host path -> sandbox path
    output_cap: int = DEFAULT_OUTPUT_CAP
    # Private copies seeded from host folders (a snapshot's), sandbox path -> host folder.
    seeds: dict[str, str] | None = None


async def _exit_then_grace(proc: asyncio.subprocess.Process) -> None:
    """Done ``_IO_GRACE_S`` after ``proc`` exits. Like docker, an exec whose background child
    still holds the output pipes returns then (the child keeps running). ``Process.wait()``
    would also wait for the pipes, hence the poll of ``returncode``."""
    while proc.returncode is None:
        await asyncio.sleep(0.05)
    await asyncio.sleep(_IO_GRACE_S)


class LocalSandbox(Sandbox):
    limits: Limits  # always resolved (a limit set to None is off)
    backend = "local"
    limit_names = RESOURCE_KEYS
    takes_writable = True
    read_only_image = True
    image_kind = "rootfs"

    def __init__(self, image: str, *, network: str = "none", **options: Any):
        # ``network`` is a named parameter: grading finds it there and turns it off.
        self.opts = parse_options(LocalOptions, self.backend, {"network": network, **options})
        if self.opts.network not in ("none", "host"):
            raise ValueError(
                f"option 'network' of the local sandbox: 'none' or 'host', got {self.opts.network!r}"
            )
        o = self.opts
        self.limits = resolve_limits(
            {k: getattr(o, k) for k in ("memory", "cpus", "pids", "disk", "nofile")}
        )
        super().__init__(image, output_cap=self.opts.output_cap)
        self.host_mode = image == "host"
        self.root = pathlib.Path("/" if self.host_mode else image)
        self._env = dict(self.opts.env or {})
        self._workdir = self.opts.workdir or "/workspace"
        stored = None if self.host_mode or image.startswith("/") else rootfs.find(image)
        if stored is not None:
            self.root = stored.root
            self._env = {**stored.env, **self._env}
            self._workdir = self.opts.workdir or stored.workdir or "/workspace"
        self._copies: dict[str, pathlib.Path] = {}
        self._tmp: pathlib.Path | None = None
        self._holder: subprocess.Popen[bytes] | None = None
        self._holder_pid = 0
        self._pidns_fd = -1
        self._mounts: list[str] = []
        self._limits = LocalLimits(self.limits)

    @property
    def sandbox_id(self) -> str:
        return self._tmp.name if self._tmp else ""

    @property
    def mounts(self) -> dict[str, str]:
        """The read-only bind mounts, host path -> sandbox path."""
        return dict(self.opts.mounts or {})

    # ---- lifecycle ---------------------------------------------------------------------------
    def _prepare(self) -> None:
        """Blocking: private copies and the mount arguments every exec repeats."""
        if not self.host_mode:
            check_root(self.root)
        self._tmp = self._limits.prepare()
        private = private_dirs(self.opts.writable)
        self._copies = private_copies(private, self._tmp)
        self._mounts = build_view(
            self.root,
            host_mode=self.host_mode,
            private=private,
            workspace=self.opts.workspace,
            store=self._tmp,
            binds=self.mounts,
            seeds=self.opts.seeds,
        )

    def _start_holder(self) -> None:
        """Blocking: the process owning the namespaces; dies with us (--die-with-parent)."""
        read_fd, write_fd = os.pipe()
        unshare = ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if self.opts.network != "host":
            unshare.append("--unshare-net")
        try:
            self._holder = subprocess.Popen(
                [
                    *self._limits.prefix(),
                    "bwrap",
                    "--dev-bind",
                    "/",
                    "/",
                    *unshare,
                    "--die-with-parent",
                    "--info-fd",
                    str(write_fd),
                    "--",
                    "sleep",
                    "infinity",
                ],
                pass_fds=[write_fd],
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(write_fd)
        with os.fdopen(read_fd, "rb") as info:
            raw = info.read()
        if not raw:
            holder = self._holder
            err = holder.stderr.read().decode(errors="replace") if holder.stderr else ""
            holder.wait()  # it failed: reap it
            if holder.stderr:
                holder.stderr.close()
            raise SandboxCreateError(f"bwrap failed to start: {err.strip()}")
        self._holder_pid = json.loads(raw)["child-pid"]
        self._pidns_fd = os.open(f"/proc/{self._holder_pid}/ns/pid", os.O_RDONLY)

    async def _create(self) -> None:
        if shutil.which("bwrap") is None:
            raise SandboxCreateError("bubblewrap is not installed: apt-get install bubblewrap")
        try:
            await asyncio.to_thread(self._prepare)
            await asyncio.to_thread(self._record_owner)
            await asyncio.to_thread(self._start_holder)
        except (OSError, subprocess.CalledProcessError) as e:
            raise SandboxCreateError(f"local sandbox: {e}") from e

    def _stop_holder(self) -> None:
        """Blocking: kill the namespace's init; the kernel kills every member before it is gone."""
        assert self._holder is not None
        if self._holder_pid <= 0:  # never signal pid 0 (our own process group)
            self._holder.kill()
            self._holder.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._holder_pid, signal.SIGKILL)
        try:
            self._holder.wait(timeout=5)  # bwrap exits once its child (the init) has
        except subprocess.TimeoutExpired:
            self._holder.kill()
            self._holder.wait()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{self._holder_pid}") and time.monotonic() < deadline:
            time.sleep(0.01)

    def _record_owner(self) -> None:
        """Blocking: what to remove should this process die first (:mod:`local_orphans`)."""
        assert self._tmp is not None
        cgroup = self._limits.cgroup
        local_orphans.record(
            self.sandbox_id, self._tmp, list(cgroup.dirs.values()) if cgroup else []
        )

    async def _destroy(self) -> None:
        if self._holder is not None:
            if self._holder.poll() is None:
                await asyncio.to_thread(self._stop_holder)
            if self._holder.stderr:
                self._holder.stderr.close()
        if self._pidns_fd >= 0:
            os.close(self._pidns_fd)
            self._pidns_fd = -1
        if self._tmp is not None:
            await asyncio.to_thread(shutil.rmtree, self._tmp, True)
        await asyncio.to_thread(self._limits.destroy)
        await asyncio.to_thread(local_orphans.forget, self.sandbox_id)

    @classmethod
    async def reap_orphans(cls) -> dict[str, int]:
        return await asyncio.to_thread(local_orphans.reap_orphans)

    # ---- capabilities ----------------------------------------------------------------------------
    @classmethod
    def supports_snapshot(cls) -> bool:
        return True

    async def snapshot(self, **options: Any) -> Any:
        from coding_agent_rl.sandbox.local_snapshot import LocalSnapshot

        self._check_open()
        try:
            return await asyncio.to_thread(
                LocalSnapshot.freeze, self.image, self._copies, options, type(self)
            )
        finally:
            await self.close()

    @classmethod
    def is_local(cls) -> bool:
        return True

    @classmethod
    def supports_bind_mounts(cls) -> bool:
        return True

    @classmethod
    def _default_bind_host(cls, network: str) -> str:
        return "127.0.0.1"  # with network "host" the sandbox shares the host's loopback

    @classmethod
    def host_address(cls, network: str = "bridge") -> str | None:
        return "127.0.0.1"

    @classmethod
    def network_options(cls, mode: str, adapter_host: str | None = None) -> dict[str, Any]:
        if mode == "open":
            return {"network": "host"}
        if mode in ("none", "adapter-only"):  # adapter-only: none + listen()
            return {"network": "none"}
        raise NetworkUnsupported(f"unknown network mode {mode!r}")

    @classmethod
    def listens_inside(cls) -> bool:
        return True

    async def listen(self, port: int) -> Any:
        self._check_open()
        if self.opts.network == "host":
            raise SandboxError("the local sandbox shares the host's network: nothing to listen in")
        ns = f"/proc/{self._holder_pid}/ns/net"
        try:
            return await asyncio.to_thread(listen_in_netns, ns, port)
        except OSError as e:
            raise SandboxError(f"local sandbox: cannot listen inside: {e}") from e

    async def limit_breaches(self) -> list[str]:
        if self._state != "open":
            return []
        return await asyncio.to_thread(self._limits.breaches)

    async def cpu_seconds(self) -> float | None:
        group = self._limits.cgroup
        if self._state != "open" or group is None:
            return None
        return await asyncio.to_thread(cgroups.cpu_seconds_of_dirs, group.dirs)

    # ---- exec ----------------------------------------------------------------------------------
    def _argv(
        self, cmd: str, ident: tuple[int, int, str], user: str, env: dict[str, str], cwd: str
    ) -> list[str]:
        uid, gid, home = ident
        h = self._holder_pid
        enter = ["nsenter", f"--ipc=/proc/{h}/ns/ipc", f"--uts=/proc/{h}/ns/uts"]
        if self.opts.network != "host":
            enter.append(f"--net=/proc/{h}/ns/net")
        argv = [
            *self._limits.prefix(),
            *enter,
            "--",
            "bwrap",
            "--pidns",
            str(self._pidns_fd),
            *self._mounts,
            "--new-session",
            "--die-with-parent",
            "--clearenv",
            "--chdir",
            cwd,
        ]
        base = {"PATH": _PATH, "HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8"}
        for key, value in {**base, **self._env, **env}.items():
            argv += ["--setenv", key, value]
        if uid != 0 or gid != 0:
            # bwrap drops every capability; keep just what setpriv needs to switch users.
            argv += [
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--",
                "setpriv",
                f"--reuid={uid}",
                f"--regid={gid}",
                "--clear-groups",
            ]
        else:
            # Root keeps only what our own set-up needs (as in the Docker backend).
            argv += ["--cap-drop", "ALL"]
            for cap in ROOT_CAPS:
                argv += ["--cap-add", f"CAP_{cap}"]
            argv.append("--")
        return [*argv, "bash", "-c", cmd]

    async def _run(
        self,
        cmd: str,
        *,
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        stdin: bytes | None = None,
        cap: int | None = None,
    ) -> tuple[int, CappedBuffer, CappedBuffer, bool]:
        passwd = host_path(self.root, self._copies, "/etc/passwd")
        ident = (0, 0, "/root") if user in _ROOT_USERS else lookup_user(passwd, user)
        out, err = CappedBuffer(cap or self.output_cap), CappedBuffer(cap or self.output_cap)
        if ident is None:
            err.append(f"unable to find user {user}: no matching entries in passwd file\n")
            return 126, out, err, False
        token = new_token()
        argv = self._argv(cmd, ident, user, {**(env or {}), TOKEN_ENV: token}, cwd or self._workdir)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=[self._pidns_fd],
            start_new_session=True,
        )

        async def pump(stream: asyncio.StreamReader | None, buf: CappedBuffer) -> None:
            while stream is not None and (chunk := await stream.read(65536)):
                buf.append(chunk)

        async def feed() -> None:
            if proc.stdin is not None and stdin is not None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(stdin)
                    await proc.stdin.drain()
                proc.stdin.close()

        full: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(pump(proc.stdout, out), pump(proc.stderr, err), feed(), proc.wait())
        )
        full.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen, if abandoned
        grace: asyncio.Future[Any] = asyncio.ensure_future(_exit_then_grace(proc))
        try:
            done, _ = await asyncio.wait(
                {full, grace}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            await asyncio.shield(self._kill(token, proc))
            raise
        finally:
            grace.cancel()
        if full in done:
            return proc.returncode if proc.returncode is not None else -1, out, err, False
        if grace in done:  # exited, but a background child holds the pipes: stop reading
            full.cancel()
            proc._transport.close()  # type: ignore[attr-defined]
            return proc.returncode if proc.returncode is not None else -1, out, err, False
        await self._kill(token, proc)
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(full, 5)
        return 124, out, err, True

    async def _kill(self, token: str, proc: asyncio.subprocess.Process) -> None:
        # The host sees every sandbox process, so the reaper runs here, limited to our pid ns.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            ns = os.readlink(f"/proc/{self._holder_pid}/ns/pid")
            await asyncio.to_thread(kill_tagged_here, token, ns)

    async def _exec(
        self,
        cmd: str,
        *,
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        idempotent: bool,
    ) -> ExecResult:
        start = time.monotonic()
        code, out, err, timed_out = await self._run(
            cmd, user=user, env=env, cwd=cwd, timeout=timeout
        )
        return ExecResult(code, out.text(), err.text(), timed_out, time.monotonic() - start)

    # ---- files: through the sandbox itself, so paths, links and permissions mean what they mean
    # inside (a read-only path fails to write as it would for a process in the sandbox) ---------
    async def _write(self, path: str, data: bytes, *, user: str, mode: int | None) -> None:
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox paths must be absolute: {path!r}")
        script = (
            'd=$(dirname -- "$1"); [ -d "$1" ] && { echo "$1: is a directory" >&2; exit 5; }; '
            'mkdir -p -- "$d" && cat > "$1" && chmod "$2" -- "$1"'
        )
        cmd = f"bash -c {shlex.quote(script)} write {shlex.quote(path)} {oct(0o644 if mode is None else mode)[2:]}"
        code, _, err, _ = await self._run(
            cmd, user=user, env=None, cwd="/", timeout=None, stdin=data, cap=64 * 1024
        )
        if code != 0:
            writable = ", ".join(private_dirs(self.opts.writable))
            raise SandboxError(
                f"cannot write {path} as {user}: {err.text().strip()} (writable: {writable})"
            )

    async def _read(self, path: str, *, user: str) -> bytes:
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox paths must be absolute: {path!r}")
        script = '[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 5; exec cat -- "$1"'
        code, out, err, _ = await self._run(
            f"bash -c {shlex.quote(script)} read {shlex.quote(path)}",
            user=user,
            env=None,
            cwd="/",
            timeout=None,
            cap=1 << 40,
        )
        if code == 3:
            raise SandboxFileNotFound(f"{path}: no such file in the sandbox")
        if code != 0:
            raise SandboxError(
                f"cannot read {path} as {user}: {err.text().strip() or f'exit {code}'}"
            )
        return out.raw()

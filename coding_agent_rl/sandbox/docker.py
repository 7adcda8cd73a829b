"""Docker backend: one container per sandbox, kept alive by ``sleep infinity`` under docker-init.

Commands run through the exec API (``bash -c``); files move through the archive API
(:mod:`docker_files`). A timeout SIGKILLs everything the exec started
(see :mod:`coding_agent_rl.sandbox.reaper`). Leftovers of a crashed run are found by label:
``coding-agent-rl.sandbox=1`` and ``coding-agent-rl.run=<run id>``. Read-only bind mounts
(``mounts``) bring host files in without a copy, e.g. an agent CLI from the host cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
import posixpath
import random
import threading
import time
from typing import Any

import docker.errors
import docker.types
import requests.exceptions

from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox import docker_files
from coding_agent_rl.sandbox.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    ImageNotFound,
    Sandbox,
    SandboxCreateError,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
)
from coding_agent_rl.sandbox.capture import CappedBuffer
from coding_agent_rl.sandbox.docker_engine import gateway_ip, gc
from coding_agent_rl.sandbox.options import parse_options
from coding_agent_rl.sandbox.reaper import TOKEN_ENV, kill_argv, new_token

__all__ = ["DockerOptions", "DockerSandbox", "gateway_ip", "gc"]

_TRANSPORT = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
_ROOT_USERS = ("root", "0", "0:0")


@dataclasses.dataclass
class DockerOptions:
    cpus: float | None = None  # CPU quota, e.g. 2 or 0.5
    memory: str | int | None = None  # "4g" or bytes
    pids_limit: int | None = None
    network: str = "bridge"  # "none" | "bridge" | a network name
    user: str | None = None  # user of the keep-alive process (exec picks its own)
    run_id: str | None = None  # label value; default: this process's run id
    output_cap: int = DEFAULT_OUTPUT_CAP  # bytes kept per stream per exec
    workdir: str | None = None  # default cwd of execs
    env: dict[str, str] | None = None  # environment of every exec
    extra_hosts: dict[str, str] | None = None  # /etc/hosts entries: name -> address
    boot_concurrency: int | None = None  # default: $SWE_BOOT_CONCURRENCY or 16
    create_attempts: int = 4  # tries on transient engine errors
    # Read-only bind mounts, host path -> sandbox path (e.g. an agent CLI from the host cache).
    # Host paths name files on the engine's machine: see docker_engine.is_local().
    mounts: dict[str, str] | None = None


def build_hint(image: str) -> str:
    """The command that builds ``image``."""
    if image.split(":")[0] == "coding-agent-rl/base":
        return "coding-agent-rl images base"
    # A converted row's image: pulled from its registry or built from its repository.
    return (
        "coding-agent-rl images build --dataset FILE (with --pull to pull it, or "
        "--repo-source TEMPLATE to build it from the row's repository)"
    )


def _transient(e: BaseException) -> bool:
    if isinstance(e, _TRANSPORT):
        return True
    if isinstance(e, docker.errors.APIError) and not isinstance(e, docker.errors.NotFound):
        return e.status_code is None or e.status_code >= 500
    return False


class _ExecRun:
    """What the reader thread shares with the awaiting coroutine."""

    def __init__(self, cap: int):
        self.out = CappedBuffer(cap)
        self.err = CappedBuffer(cap)
        self.started = False  # the engine accepted exec_start: the command may be running
        self.finished = threading.Event()
        self._stream: Any = None
        self._cancelled = False
        self._lock = threading.Lock()

    def attach(self, stream: Any) -> None:
        with self._lock:
            self._stream = stream
            cancelled = self._cancelled
        if cancelled:
            stream.close()

    def cancel(self) -> None:
        """Stop reading (closes the connection, which unblocks the reader thread)."""
        with self._lock:
            self._cancelled = True
            stream = self._stream
        if stream is not None:
            stream.close()

    @property
    def cancelled(self) -> bool:
        return self._cancelled


class DockerSandbox(Sandbox):
    backend = "docker"

    def __init__(self, image: str, **options: Any):
        self.opts = parse_options(DockerOptions, self.backend, options)
        for host, target in (self.opts.mounts or {}).items():
            if not (posixpath.isabs(host) and posixpath.isabs(target)):
                raise ValueError(f"mount {host!r} -> {target!r}: both paths must be absolute")
        super().__init__(image, output_cap=self.opts.output_cap)
        self.run_id = self.opts.run_id or engine.default_run_id()
        self._cid: str | None = None
        self._create_fut: asyncio.Future[None] | None = None

    @property
    def sandbox_id(self) -> str:
        return self._cid[:12] if self._cid else ""

    @property
    def container_id(self) -> str | None:
        return self._cid

    @property
    def mounts(self) -> dict[str, str]:
        """The read-only bind mounts, host path -> sandbox path."""
        return dict(self.opts.mounts or {})

    # ---- lifecycle ---------------------------------------------------------------------------
    def _create_blocking(self) -> None:
        api = engine.client().api
        o = self.opts
        host_config = api.create_host_config(
            init=True,
            nano_cpus=int(o.cpus * 1e9) if o.cpus else None,
            mem_limit=o.memory,
            pids_limit=o.pids_limit,
            network_mode=o.network,
            extra_hosts=o.extra_hosts,
            # A "bind" mount (unlike a legacy volume bind) fails when the host path is missing
            # instead of creating an empty directory there.
            mounts=[
                docker.types.Mount(target, host, type="bind", read_only=True)
                for host, target in (o.mounts or {}).items()
            ]
            or None,
        )
        created = api.create_container(
            self.image,
            entrypoint=["sleep", "infinity"],  # an explicit entrypoint also drops the image's CMD
            labels={engine.LABEL_SANDBOX: "1", engine.LABEL_RUN: self.run_id},
            host_config=host_config,
            environment=o.env,
            working_dir=o.workdir,
            user=o.user,
            detach=True,
        )
        self._cid = created["Id"]
        api.start(self._cid)

    async def _create(self) -> None:
        attempts = max(1, self.opts.create_attempts)
        async with engine.boot_semaphore(engine.boot_concurrency(self.opts.boot_concurrency)):
            for attempt in range(attempts):
                self._create_fut = engine.in_thread(self._create_blocking)
                try:
                    # Cancellation leaves the thread running; _destroy waits for it.
                    await asyncio.shield(self._create_fut)
                    return
                except docker.errors.ImageNotFound as e:
                    raise ImageNotFound(
                        f"docker image {self.image!r} not found; build it with: "
                        f"{build_hint(self.image)}"
                    ) from e
                except Exception as e:
                    if not _transient(e) or attempt == attempts - 1:
                        raise SandboxCreateError(f"docker: cannot create a sandbox: {e}") from e
                    await self._destroy()
                    self._cid = None
                    await asyncio.sleep(0.25 * 2**attempt * (1 + random.random()))

    async def _destroy(self) -> None:
        if self._create_fut is not None and not self._create_fut.done():
            await asyncio.wait([self._create_fut])
        if self._cid is None:
            return
        for attempt in range(3):
            try:
                await engine.in_thread(engine.remove_container, self._cid)
                return
            except Exception as e:
                if not _transient(e) or attempt == 2:
                    raise
                await asyncio.sleep(0.5 * 2**attempt)

    # ---- exec ----------------------------------------------------------------------------------
    def _run_exec(
        self,
        argv: list[str],
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        run: _ExecRun,
    ) -> int:
        """Blocking: create, stream and inspect one exec; returns its exit code."""
        api = engine.client().api
        try:
            try:
                created = api.exec_create(
                    self._cid,
                    argv,
                    stdout=True,
                    stderr=True,
                    user=user,
                    environment=env,
                    workdir=cwd,
                )
            except docker.errors.APIError as e:
                if e.status_code in (404, 409):  # no such container / not running
                    raise SandboxGone(f"docker sandbox {self.sandbox_id} is gone: {e}") from e
                raise
            run.started = True  # from here on the command may be running
            stream = api.exec_start(created["Id"], stream=True, demux=True)
            run.attach(stream)
            for out, err in stream:
                if out:
                    run.out.append(out)
                if err:
                    run.err.append(err)
            while True:
                info = api.exec_inspect(created["Id"])
                # The stream ends when the command closes its stdout/stderr, which can precede
                # its exit by a little.
                if not info["Running"] or run.cancelled:
                    break
                time.sleep(0.01)
            code = info["ExitCode"] if info["ExitCode"] is not None else -1
            if code == 126 and not info.get("Pid"):
                # The engine could not start it (no such user or cwd). Engine 20.10 writes why on
                # the stdout stream, or sometimes nothing; either way it belongs on stderr.
                why = run.out.raw().decode(errors="replace").strip()
                run.out = CappedBuffer(run.out.cap)
                run.err.append(
                    f"docker could not start the command (user {user!r}, cwd "
                    f"{cwd or '(default)'!r}): {why or 'does that user exist?'}\n"
                )
            return code
        finally:
            run.finished.set()

    def _reap_blocking(self, token: str, run: _ExecRun) -> None:
        """Kill the exec tagged ``token`` and everything in its session; then stop reading."""
        try:
            self._run_exec(kill_argv(token), "root", None, "/", _ExecRun(64 * 1024))
        except Exception:
            pass  # the container may be gone, which kills everything anyway
        if not run.finished.wait(5):  # an escaped daemon may still hold the output pipes
            run.cancel()

    async def _exec_once(
        self,
        cmd: str,
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        run: _ExecRun,
    ) -> ExecResult:
        token = new_token()
        full_env = {**(env or {}), TOKEN_ENV: token}
        start = time.monotonic()
        fut = engine.in_thread(self._run_exec, ["bash", "-c", cmd], user, full_env, cwd, run)
        try:
            code = await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            await engine.in_thread(self._reap_blocking, token, run)
            return ExecResult(124, run.out.text(), run.err.text(), True, time.monotonic() - start)
        except asyncio.CancelledError:
            engine.submit(self._reap_blocking, token, run)  # outlives this task and its loop
            raise
        except _TRANSPORT:
            if run.started:  # the command may still run: never leave it behind
                await engine.in_thread(self._reap_blocking, token, run)
            raise
        return ExecResult(code, run.out.text(), run.err.text(), False, time.monotonic() - start)

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
        for attempt in range(3):
            run = _ExecRun(self.output_cap)
            try:
                return await self._exec_once(cmd, user, env, cwd, timeout, run)
            except SandboxError:
                raise
            except _TRANSPORT as e:
                # Before the engine started it, retrying is always safe; after, only if allowed.
                if (run.started and not idempotent) or attempt == 2:
                    raise SandboxError(f"docker exec transport failure: {e}") from e
            except docker.errors.NotFound as e:
                raise SandboxGone(f"docker sandbox {self.sandbox_id} is gone: {e}") from e
            except docker.errors.APIError as e:
                raise SandboxError(f"docker exec failed: {e}") from e
            await asyncio.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    async def _exec_simple(self, argv: list[str], user: str) -> tuple[int, bytes, bytes]:
        run = _ExecRun(1024 * 1024)
        code = await engine.in_thread(self._run_exec, argv, user, None, "/", run)
        return code, run.out.raw(), run.err.raw()

    # ---- files ---------------------------------------------------------------------------------
    async def _check_as_user(self, script: str, path: str, user: str, *args: str) -> bytes:
        """Run a permission check as ``user``; exit 3 = missing, 4 = denied, 5 = a directory."""
        code, out, err = await self._exec_simple(["bash", "-c", script, "check", *args], user)
        if code == 3:
            raise SandboxFileNotFound(f"{path}: no such file in the sandbox")
        if code != 0:
            detail = err.decode(errors="replace").strip() or f"exit {code}"
            raise SandboxError(f"user {user!r} cannot access {path}: {detail}")
        return out

    async def _write(self, path: str, data: bytes, *, user: str, mode: int | None) -> None:
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox paths must be absolute: {path!r}")
        uid = gid = 0
        if user not in _ROOT_USERS:
            # Parents are created by the user (so they own them); writability is checked too.
            script = (
                'mkdir -p -- "$1" || exit 4; if [ -e "$2" ]; then [ -w "$2" ] || exit 4; '
                'else [ -w "$1" ] || exit 4; fi; id -u; id -g'
            )
            out = await self._check_as_user(script, path, user, posixpath.dirname(path), path)
            uid, gid = (int(x) for x in out.split()[:2])
        await engine.in_thread(docker_files.put_file, self._cid, path, data, uid, gid, mode)

    async def _read(self, path: str, *, user: str) -> bytes:
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox paths must be absolute: {path!r}")
        if user not in _ROOT_USERS:
            script = (
                'if [ ! -e "$1" ]; then [ -x "$(dirname -- "$1")" ] && exit 3; exit 4; fi; '
                '[ -d "$1" ] && exit 5; [ -r "$1" ] || exit 4; exit 0'
            )
            await self._check_as_user(script, path, user, path)
        return await engine.in_thread(docker_files.get_file, self._cid, path)

"""Docker backend: one container per sandbox, kept alive by ``sleep infinity`` under docker-init.

Commands run through the exec API (``bash -c``); files move through the archive API
(:mod:`docker_files`). A timeout SIGKILLs everything the exec started
(see :mod:`coding_agent_rl.sandbox.reaper`). Leftovers of a crashed run are found by label:
``coding-agent-rl.sandbox=1`` and ``coding-agent-rl.run=<run id>``, plus the owner process
(``coding-agent-rl.owner.*``, :mod:`owner`): a runtime start removes those whose owner is gone
(:func:`docker_engine.reap_report`). Read-only bind mounts
(``mounts``) bring host files in without a copy, e.g. an agent CLI from the host cache.
Every container gets the default limits, least privilege and a capped writable disk
(:mod:`docker_isolation`); with ``network="none"`` and an engine on this host, :meth:`listen`
puts a socket inside it (adapter-only egress). ``runtime`` picks an engine runtime (gVisor).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import posixpath
import random
import time
from typing import Any

import docker.errors
import docker.types
import requests.exceptions
import tenacity

from coding_agent_rl import settings
from coding_agent_rl.limits import DEFAULT_LIMITS, RESOURCE_KEYS, Limits, resolve_limits
from coding_agent_rl.sandbox import cgroups, docker_files
from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox import docker_isolation as iso
from coding_agent_rl.sandbox.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    ImageNotFound,
    NetworkUnsupported,
    Sandbox,
    SandboxCreateError,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
)
from coding_agent_rl.sandbox.docker_engine import gateway_ip, gc
from coding_agent_rl.sandbox.docker_exec import ExecRun, container_running, reap, run_exec
from coding_agent_rl.sandbox.netns import listen_in_netns
from coding_agent_rl.sandbox.options import parse_options
from coding_agent_rl.sandbox.reaper import TOKEN_ENV, new_token

__all__ = ["DockerOptions", "DockerSandbox", "gateway_ip", "gc"]

_TRANSPORT = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
_ROOT_USERS = ("root", "0", "0:0")


_D = DEFAULT_LIMITS


@dataclasses.dataclass
class DockerOptions:
    # Limits (limits.py: defaults and why; None = unlimited).
    cpus: float | None = _D.cpus  # CPU quota, e.g. 2 or 0.5
    memory: str | int | None = _D.memory  # "4g" or bytes; swap = memory
    pids: int | None = _D.pids
    disk: str | int | None = _D.disk  # writable-disk cap (a capped disk; needs the engine here)
    nofile: int | None = _D.nofile  # open files per process
    writable: list[str] | None = None  # paths on the capped disk besides /tmp, /home, ...
    hardened: bool = True  # least privilege: capabilities dropped, no-new-privileges
    runtime: str | None = None  # an engine runtime, e.g. "runsc" (gVisor; see docs/isolation.md)
    network: str = "bridge"  # "none" | "bridge" | a network name
    user: str | None = None  # user of the keep-alive process (exec picks its own)
    run_id: str | None = None  # label value; default: this process's run id
    output_cap: int = DEFAULT_OUTPUT_CAP  # bytes kept per stream per exec
    workdir: str | None = None  # default cwd of execs
    env: dict[str, str] | None = None  # environment of every exec
    extra_hosts: dict[str, str] | None = None  # /etc/hosts entries: name -> address
    boot_concurrency: int | None = None  # creations in flight (default: the settings')
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


class DockerSandbox(Sandbox):
    limits: Limits  # always resolved (a limit set to None is off)
    backend = "docker"
    limit_names = RESOURCE_KEYS
    takes_writable = True
    image_kind = "docker"

    def __init__(self, image: str, **options: Any):
        self.opts = parse_options(DockerOptions, self.backend, options)
        for host, target in (self.opts.mounts or {}).items():
            if not (posixpath.isabs(host) and posixpath.isabs(target)):
                raise ValueError(f"mount {host!r} -> {target!r}: both paths must be absolute")
        o = self.opts
        self.limits = resolve_limits(
            {k: getattr(o, k) for k in ("memory", "cpus", "pids", "disk", "nofile")}
        )
        for path in o.writable or ():
            if not posixpath.isabs(path):
                raise ValueError(f"writable path {path!r}: must be absolute")
        super().__init__(image, output_cap=o.output_cap)
        self.run_id = o.run_id or engine.default_run_id()
        self._cid: str | None = None
        self._create_fut: asyncio.Future[None] | None = None
        self._disk: iso.CappedDisk | None = None
        self._volumes: list[str] = []
        self._watch: iso.Watch | None = None

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
        labels = {engine.LABEL_SANDBOX: "1", engine.LABEL_RUN: self.run_id, **engine.owner_labels()}
        mounts = [
            # A "bind" mount (unlike a legacy volume bind) fails when the host path is missing
            # instead of creating an empty directory there.
            docker.types.Mount(target, host, type="bind", read_only=True)
            for host, target in (o.mounts or {}).items()
        ]
        self._disk = iso.make_disk(self.run_id, self.limits, engine.is_local())
        if self._disk is not None:
            mounts += iso.disk_mounts(self._disk, iso.disk_paths(o.writable), labels)
        host_config = api.create_host_config(
            init=True,
            network_mode=o.network,
            extra_hosts=o.extra_hosts,
            mounts=mounts or None,
            runtime=o.runtime,
            **iso.host_config_kwargs(self.limits, hardened=o.hardened),
        )
        created = api.create_container(
            self.image,
            entrypoint=["sleep", "infinity"],  # an explicit entrypoint also drops the image's CMD
            labels=labels,
            host_config=host_config,
            environment=o.env,
            working_dir=o.workdir,
            user=o.user,
            detach=True,
        )
        self._cid = created["Id"]
        api.start(self._cid)
        info = api.inspect_container(self._cid) if engine.is_local() else {}
        # The disk's volumes, removed with the container, or by name should it be gone already
        # (`docker rm -f` without -v leaves anonymous volumes behind).
        self._volumes = [m["Name"] for m in info.get("Mounts") or [] if m.get("Type") == "volume"]
        pid = (info.get("State") or {}).get("Pid") or None
        upper = ((info.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
        self._watch = iso.Watch(self.limits, self._disk, pid, upper if pid else None)

    @property
    def boot_limit(self) -> int | None:
        return self.opts.boot_concurrency

    async def _create(self) -> None:
        attempts = max(1, self.opts.create_attempts)
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
                    if "rlimit type 7" in str(e):
                        raise SandboxCreateError(
                            f"docker: open-files limit nofile={self.limits.nofile} is above "
                            f"the engine's own hard limit: lower it (option nofile): {e}"
                        ) from e
                    if "runtime" in str(e).lower() and self.opts.runtime:
                        raise SandboxCreateError(
                            f"docker: the engine has no runtime {self.opts.runtime!r} "
                            f"registered (see docs/isolation.md, gVisor): {e}"
                        ) from e
                    raise SandboxCreateError(f"docker: cannot create a sandbox: {e}") from e
                await self._destroy()
                self._cid = None
                await asyncio.sleep(0.25 * 2**attempt * (1 + random.random()))

    async def _destroy(self) -> None:
        if self._create_fut is not None and not self._create_fut.done():
            await asyncio.wait([self._create_fut])
        try:
            if self._cid is not None:
                await self._remove_container()
            if self._volumes:
                await engine.in_thread(engine.remove_volumes_named, self._volumes)
        finally:
            disk, self._disk = self._disk, None
            if disk is not None:  # after the container: its volumes held the disk
                await engine.in_thread(disk.destroy)

    async def _remove_container(self) -> None:
        assert self._cid is not None
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(3),
            wait=tenacity.wait_exponential(multiplier=0.5),  # 0.5 s, 1 s
            retry=tenacity.retry_if_exception(_transient),
            reraise=True,
        ):
            with attempt:
                await engine.in_thread(engine.remove_container, self._cid)

    # ---- capabilities ----------------------------------------------------------------------------
    @classmethod
    def is_local(cls) -> bool:
        return engine.is_local()

    @classmethod
    async def reap_orphans(cls) -> dict[str, int]:
        return await engine.reap_report()

    @classmethod
    def supports_bind_mounts(cls) -> bool:
        return engine.is_local()  # host paths name the engine machine's files

    @classmethod
    def supports_snapshot(cls) -> bool:
        return True

    @classmethod
    def template_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        return {**options, "disk": None}  # volumes are not committed: everything in its layer

    async def snapshot(self, **options: Any) -> Any:
        from coding_agent_rl.sandbox.docker_snapshot import DockerSnapshot, commit

        self._check_open()
        if self._disk is not None:
            raise SandboxError(
                "docker: a sandbox with a capped disk cannot be snapshotted (its files are on "
                "volumes): create it with template_options()"
            )
        assert self._cid is not None
        labels = {engine.LABEL_SANDBOX: "1", engine.LABEL_RUN: self.run_id, **engine.owner_labels()}
        try:
            image_id = await engine.in_thread(commit, self._cid, labels)
        except docker.errors.APIError as e:
            raise SandboxError(f"docker: cannot commit sandbox {self.sandbox_id}: {e}") from e
        finally:
            await self.close()
        return DockerSnapshot(image_id, options, make=type(self))

    @classmethod
    def _default_bind_host(cls, network: str) -> str:
        # The bridge's gateway, not 0.0.0.0: the listener stays off every other interface.
        return gateway_ip(network)

    @classmethod
    def host_address(cls, network: str = "bridge") -> str | None:
        return gateway_ip(network)

    @classmethod
    def network_options(cls, mode: str, adapter_host: str | None = None) -> dict[str, Any]:
        if mode == "open":
            return {"network": "bridge"}
        if mode == "none":
            return {"network": "none"}
        if mode == "adapter-only":
            if not cls.listens_inside():
                raise NetworkUnsupported(
                    "adapter-only egress with Docker serves the adapter inside each sandbox's "
                    "network namespace: it needs the engine on this machine (DOCKER_HOST is "
                    f"{settings.current().docker_host!r}) and root; use agent network 'open'"
                )
            return {"network": "none"}
        raise NetworkUnsupported(f"unknown network mode {mode!r}")

    @classmethod
    def listens_inside(cls) -> bool:
        return engine.is_local() and os.geteuid() == 0

    async def listen(self, port: int) -> Any:
        self._check_open()
        pid = self._watch.pid if self._watch is not None else None
        if pid is None:
            raise SandboxError("docker: the container's process is not on this host")
        try:
            return await engine.in_thread(listen_in_netns, f"/proc/{pid}/ns/net", port)
        except OSError as e:
            raise SandboxError(
                f"docker sandbox {self.sandbox_id}: cannot listen inside: {e}"
            ) from e

    async def cpu_seconds(self) -> float | None:
        pid = self._watch.pid if self._watch is not None and self._state == "open" else None
        return None if pid is None else await engine.in_thread(cgroups.cpu_seconds_of_pid, pid)

    async def limit_breaches(self) -> list[str]:
        watch = self._watch
        if watch is None or self._state != "open":
            return []
        if watch.on_host():
            found = await engine.in_thread(watch.host_breaches)
        else:
            try:
                code, out, _ = await self._exec_simple(
                    ["bash", "-c", cgroups.IN_SANDBOX_SCRIPT], "root"
                )
                found = watch.from_script(out.decode(errors="replace")) if code == 0 else []
            except Exception:  # e.g. no process can start (pids exhausted): nothing to read
                found = []
        return found or await engine.in_thread(self._oom_killed)

    def _oom_killed(self) -> list[str]:
        """The container itself died of its memory limit (the engine's own evidence): its main
        process was OOM-killed, e.g. gVisor's kernel holding every process of the sandbox."""
        for _ in range(15):  # the engine records the OOM event a moment after the death
            try:
                state = engine.client().api.inspect_container(self._cid or "")["State"]
            except Exception:
                return []
            pid = self._watch.pid if self._watch else None
            if state.get("Running") and not (pid and not os.path.exists(f"/proc/{pid}")):
                return []  # alive (its init still runs here, or we cannot look)
            if state.get("OOMKilled"):
                return [f"{self.limits.describe('memory')} exceeded (the sandbox was OOM-killed)"]
            time.sleep(0.2)
        return []

    # ---- exec ----------------------------------------------------------------------------------
    async def _exec_once(
        self,
        cmd: str,
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        run: ExecRun,
    ) -> ExecResult:
        token = new_token()
        full_env = {**(env or {}), TOKEN_ENV: token}
        start = time.monotonic()
        fut = engine.in_thread(
            run_exec, self._cid, self.sandbox_id, ["bash", "-c", cmd], user, full_env, cwd, run
        )
        if self.opts.runtime:  # another runtime may leave the stream open when the box dies
            watcher = asyncio.ensure_future(self._close_if_dead(fut, run))
            fut.add_done_callback(lambda _: watcher.cancel())
        try:
            code = await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            await engine.in_thread(reap, self._cid, self.sandbox_id, token, run)
            return ExecResult(124, run.out.text(), run.err.text(), True, time.monotonic() - start)
        except asyncio.CancelledError:
            engine.submit(
                reap, self._cid, self.sandbox_id, token, run
            )  # outlives this task and its loop
            raise
        except _TRANSPORT:
            if run.started:  # the command may still run: never leave it behind
                await engine.in_thread(reap, self._cid, self.sandbox_id, token, run)
            raise
        return ExecResult(code, run.out.text(), run.err.text(), False, time.monotonic() - start)

    async def _close_if_dead(self, fut: asyncio.Future[int], run: ExecRun) -> None:
        """Stop reading ``run`` once its container is no longer running (checked each second)."""
        while not fut.done():
            await asyncio.sleep(1.0)
            if not await engine.in_thread(container_running, self._cid):
                run.cancel()
                return

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
            run = ExecRun(self.output_cap)
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
        run = ExecRun(1024 * 1024)
        code = await engine.in_thread(
            run_exec, self._cid, self.sandbox_id, argv, user, None, "/", run
        )
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

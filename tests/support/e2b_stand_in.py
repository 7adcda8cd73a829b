"""A stand-in for ``e2b.AsyncSandbox`` at the SDK boundary (E2B's cloud cannot be reached here).

Every method binds its arguments to the installed SDK's own signature (``**opts`` and the
``network`` dict by their TypedDict keys): a keyword the real SDK does not accept fails here too.
Errors are the SDK's own classes, made by the SDK's own mapping functions. Modelled:

- lifetime: ``create`` refuses a ``timeout`` above the plan's maximum (:attr:`max_lifetime_s`)
  as E2B's API does, and a sandbox dies when its timeout runs out;
- network: with ``allow_internet_access=False`` or an egress filter, commands run in their own
  network namespace whose only answering addresses (on its loopback) are the filter's
  addresses plus the DNS servers E2B opens (:attr:`StandInAsyncSandbox.egress`);
- idempotency keys (a repeated key gets the same sandbox) and the live sandboxes (billed);
- commands get only the environment passed in (plus a login's ``HOME``/``USER``/``PATH``),
  never this host's; they run as ``/bin/bash -l -c CMD`` in a per-sandbox temp dir;
- injected faults (:attr:`StandInAsyncSandbox.faults`): a lost ``create`` answer, a command
  stream dropped mid-way (connectrpc's ``ConnectError`` over a pyqwest ``ReadError``, what the
  SDK raises while the sandbox is up), a dropped upload, a slow upload link.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import ipaddress
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import tempfile
import typing
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pyqwest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b import (
    AsyncCommandHandle,
    CommandExitException,
    CommandResult,
    FileNotFoundException,
    FileType,
    SandboxException,
    SandboxNotRunningException,
    TimeoutException,
    WriteInfo,
)
from e2b import AsyncSandbox as RealAsyncSandbox
from e2b.api import api_exception_from_code
from e2b.envd.api import handle_envd_api_transport_exception
from e2b.envd.rpc import ahandle_rpc_exception_with_health
from e2b.retry import resolve_idempotency_key
from e2b.sandbox.sandbox_api import SandboxNetworkOpts
from e2b.sandbox_async.commands.command import Commands as RealCommands
from e2b.sandbox_async.filesystem.filesystem import Filesystem as RealFilesystem

KNOWN_TEMPLATES = {"base", "coding-agent-rl/base:latest"}
_TAG = "E2B_STAND_IN_SANDBOX"  # marks every process of a stand-in sandbox (its "VM")
E2B_DEFAULT_DNS = "8.8.8.8"  # what E2B opens for a name in allow_out without dns_servers
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Every call the stand-in answered: (the real SDK method's qualified name, its bound arguments).
CALLS: list[tuple[str, dict[str, Any]]] = []


def _signature(real: Callable[..., Any]) -> inspect.Signature:
    sig = inspect.signature(real)
    params = list(sig.parameters.values())
    if params and params[0].name == "self":
        sig = sig.replace(parameters=params[1:])
    return sig


def _keys(typed_dict: Any) -> frozenset[str]:
    return frozenset(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def bind(real: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``args``/``kwargs`` bound to the real SDK method ``real`` (defaults applied); raises
    ``TypeError`` as the real call would, ``**opts: Unpack[TypedDict]`` checked by key."""
    sig = _signature(real)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    for name, param in sig.parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD and bound.arguments.get(name):
            (typed,) = typing.get_args(param.annotation)
            unknown = set(bound.arguments[name]) - _keys(typed)
            if unknown:
                raise TypeError(
                    f"{real.__qualname__}() got unexpected keyword argument(s) {sorted(unknown)}"
                )
    CALLS.append((real.__qualname__, dict(bound.arguments)))
    return dict(bound.arguments)


def mirrors(real: Callable[..., Any]) -> Callable[[Any], Any]:
    """Make an async stand-in method take exactly what ``real`` takes: it is called with the
    arguments bound by :func:`bind`, and ``inspect.signature`` shows the real signature."""

    def deco(fn: Callable[[Any, dict[str, Any]], Any]) -> Any:
        @functools.wraps(fn)
        async def wrapper(owner: Any, *args: Any, **kwargs: Any) -> Any:
            return await fn(owner, bind(real, *args, **kwargs))

        wrapper.__signature__ = inspect.signature(getattr(real, "__func__", real))  # type: ignore[attr-defined]
        return wrapper

    return deco


def _kill_tagged(sandbox_id: str) -> None:
    """What the VM's end does: every process of the sandbox dies."""
    needle = f"{_TAG}={sandbox_id}".encode()
    for _ in range(5):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                os.kill(int(name), signal.SIGKILL)
                found = True
            except OSError:
                continue
        if not found:
            return


class StandInCommandHandle:
    """Mirrors ``AsyncCommandHandle``: ``pid``, ``wait()``, ``kill()``, ``disconnect()``."""

    def __init__(
        self,
        box: StandInAsyncSandbox,
        proc: asyncio.subprocess.Process,
        on_stdout: Any,
        on_stderr: Any,
        timeout: float | None,
        retain_output: bool,
    ):
        self._box = box
        self._proc = proc
        self._stdout: list[str] | None = [] if retain_output else None
        self._stderr: list[str] | None = [] if retain_output else None
        self._drop = box.take_fault("stream_drop")
        self._task = asyncio.ensure_future(self._run(on_stdout, on_stderr, timeout))

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def _pump(self, stream: asyncio.StreamReader, sink: list[str] | None, cb: Any) -> None:
        while chunk := await stream.read(65536):
            text = chunk.decode("utf-8", "replace")
            if sink is not None:
                sink.append(text)
            if cb is not None:
                res = cb(text)
                if asyncio.iscoroutine(res):
                    await res
            if self._drop:
                raise self._dropped()

    @staticmethod
    def _dropped() -> ConnectError:
        """What connectrpc raises when the connection under an envd stream breaks."""
        cause = pyqwest.ReadError("connection reset by peer")
        try:
            raise ConnectError(Code.UNAVAILABLE, str(cause)) from cause
        except ConnectError as e:
            return e

    async def _health(self) -> bool:
        return self._box.alive

    async def _run(self, on_stdout: Any, on_stderr: Any, timeout: float | None) -> int:
        work = asyncio.gather(
            self._pump(self._proc.stdout, self._stdout, on_stdout),  # type: ignore[arg-type]
            self._pump(self._proc.stderr, self._stderr, on_stderr),  # type: ignore[arg-type]
            self._proc.wait(),
        )
        try:
            await asyncio.wait_for(work, timeout or None)
        except asyncio.TimeoutError:
            # envd's stream deadline: the SDK reports it, the process is not killed.
            raise TimeoutException("context deadline exceeded: the command timed out") from None
        except ConnectError as e:  # the SDK's own mapping, health probe included
            raise await ahandle_rpc_exception_with_health(e, self._health)  # noqa: B904
        if not self._box.alive:  # the VM ended under the command: the stream broke
            raise await ahandle_rpc_exception_with_health(self._dropped(), self._health)
        return self._proc.returncode or 0

    @mirrors(AsyncCommandHandle.wait)
    async def wait(self, a: dict[str, Any]) -> CommandResult:
        code = await self._task
        out = None if self._stdout is None else "".join(self._stdout)
        err = None if self._stderr is None else "".join(self._stderr)
        if code != 0:
            raise CommandExitException(stdout=out, stderr=err, exit_code=code, error=None)
        return CommandResult(stdout=out, stderr=err, exit_code=code, error=None)

    @mirrors(AsyncCommandHandle.kill)
    async def kill(self, a: dict[str, Any]) -> bool:
        try:
            self._proc.send_signal(signal.SIGKILL)
            return True
        except ProcessLookupError:
            return False

    @mirrors(AsyncCommandHandle.disconnect)
    async def disconnect(self, a: dict[str, Any]) -> None:
        self._task.cancel()
        await asyncio.wait([self._task])


class StandInCommands:
    def __init__(self, box: StandInAsyncSandbox):
        self._box = box

    @mirrors(RealCommands.run)
    async def run(self, a: dict[str, Any]) -> Any:
        self._box.check()
        user = a["user"] or "user"
        argv = ["/bin/bash", "-l", "-c", a["cmd"]]
        home, name = "/root", "root"
        if user not in ("root", "user"):  # E2B's default user stands for root here
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                raise SandboxException(f"user {user!r} does not exist") from None
            home, name = entry.pw_dir, entry.pw_name
            argv = [
                "setpriv",
                f"--reuid={entry.pw_uid}",
                f"--regid={entry.pw_gid}",
                "--clear-groups",
                *argv,
            ]
        argv = self._box.in_netns(argv)
        login = {"PATH": LOGIN_PATH, "HOME": home, "USER": name, "LOGNAME": name}
        env = {**login, **self._box.envs, **(a["envs"] or {}), _TAG: self._box.sandbox_id}
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=a["cwd"] or str(self._box.root),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        handle = StandInCommandHandle(
            self._box, proc, a["on_stdout"], a["on_stderr"], a["timeout"], a["retain_output"]
        )
        return handle if a["background"] else await handle.wait()

    @mirrors(RealCommands.kill)
    async def kill(self, a: dict[str, Any]) -> bool:
        try:
            os.kill(a["pid"], signal.SIGKILL)
            return True
        except ProcessLookupError:
            return False


class StandInFilesystem:
    DEFAULT_REQUEST_TIMEOUT = 60.0  # the SDK's ConnectionConfig default

    def __init__(self, box: StandInAsyncSandbox):
        self._box = box

    @mirrors(RealFilesystem.write)
    async def write(self, a: dict[str, Any]) -> WriteInfo:
        self._box.check()
        data = a["data"]
        body = data.encode() if isinstance(data, str) else bytes(data)
        if self._box.take_fault("upload_drop"):  # the SDK's mapping, sandbox still running
            raise handle_envd_api_transport_exception(
                httpx.WriteError("connection reset while sending the body"), True
            )
        rate = StandInAsyncSandbox.link_bytes_per_s
        deadline = a["request_timeout"] or self.DEFAULT_REQUEST_TIMEOUT
        if rate and len(body) / rate > deadline:
            raise httpx.WriteTimeout(f"upload of {len(body)} bytes timed out after {deadline}s")
        target = pathlib.Path(a["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        user = a["user"]
        if user not in (None, "root", "user"):
            entry = pwd.getpwnam(user)
            os.chown(target, entry.pw_uid, entry.pw_gid)
        return WriteInfo(name=target.name, type=FileType.FILE, path=str(target))

    @mirrors(RealFilesystem.read)
    async def read(self, a: dict[str, Any]) -> Any:
        self._box.check()
        target = pathlib.Path(a["path"])
        if not target.is_file():
            raise FileNotFoundException(f"path '{a['path']}' does not exist")
        data = target.read_bytes()
        return bytearray(data) if a["format"] == "bytes" else data.decode("utf-8", "replace")


def _egress(allow_internet_access: bool | None, network: dict[str, Any] | None) -> list[str] | None:
    """The addresses a sandbox may reach under E2B's rules (None: everything)."""
    if allow_internet_access is False:
        return []
    if not network or "deny_out" not in network:
        return None
    allow = list(network.get("allow_out") or [])
    names = [a for a in allow if not _is_ip(a)]
    dns = network.get("dns_servers")
    if dns is not None and (len(dns) > 10 or not all(_is_ipv4(d) for d in dns)):
        raise api_exception_from_code(400, "dns_servers: up to 10 IPv4 addresses")
    resolvers = (list(dns) if dns is not None else [E2B_DEFAULT_DNS]) if names else []
    return [a for a in allow if _is_ip(a)] + resolvers


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return True


def _is_ipv4(value: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(value), ipaddress.IPv4Address)
    except ValueError:
        return False


class StandInAsyncSandbox:
    """``AsyncSandbox.create(...)`` -> an object with ``commands``, ``files``, ``kill()``."""

    created: list[dict[str, Any]] = []  # create() arguments as the SDK bound them
    live: list[StandInAsyncSandbox] = []  # sandboxes E2B would bill now
    max_lifetime_s = 3600  # the plan's maximum timeout (E2B Hobby/Base)
    link_bytes_per_s: float | None = None  # an upload slower than its timeout fails
    faults: dict[str, int] = {}  # "create_lost", "stream_drop", "upload_drop": how many next
    create_errors: list[Exception] = []  # raised by the next creates, before anything is made
    _by_key: dict[str, StandInAsyncSandbox] = {}

    @classmethod
    def reset(cls) -> None:
        cls.created.clear()
        cls.live.clear()
        cls.faults.clear()
        cls.create_errors.clear()
        cls._by_key.clear()
        cls.link_bytes_per_s = None
        CALLS.clear()

    @classmethod
    def take_fault(cls, name: str) -> bool:
        if cls.faults.get(name, 0) > 0:
            cls.faults[name] -= 1
            return True
        return False

    def __init__(self, envs: dict[str, str] | None, egress: list[str] | None):
        self.sandbox_id = f"standin-{uuid.uuid4().hex[:10]}"
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="e2b-stand-in-"))
        self.root.chmod(0o777)
        self.envs = dict(envs or {})
        self.egress = egress
        self.alive = True
        self.commands = StandInCommands(self)
        self.files = StandInFilesystem(self)
        self._netns_holder: subprocess.Popen[bytes] | None = None
        if egress is not None:
            self._netns_holder = self._start_netns(egress)

    def _start_netns(self, egress: list[str]) -> subprocess.Popen[bytes]:
        """A network namespace whose loopback carries the allowed addresses: those answer
        (refused unless something listens), every other address is unreachable."""
        nets = [ipaddress.ip_network(a, strict=False) for a in egress]
        setup = ["ip link set lo up"] + [
            f"ip addr add {n.network_address}/32 dev lo" for n in nets if n.version == 4
        ]
        holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--",
                "sh",
                "-c",
                " && ".join([*setup, "echo up", "exec sleep 1d"]),
            ],
            env={"PATH": LOGIN_PATH, _TAG: self.sandbox_id},
            stdout=subprocess.PIPE,
        )
        assert holder.stdout is not None
        with holder.stdout:  # nothing more comes: the shell became `sleep`
            assert holder.stdout.readline() == b"up\n", "netns setup"
        return holder

    def in_netns(self, argv: list[str]) -> list[str]:
        if self._netns_holder is None:
            return argv
        return ["nsenter", f"--net=/proc/{self._netns_holder.pid}/ns/net", "--", *argv]

    def check(self) -> None:
        if not self.alive:
            raise SandboxNotRunningException("sandbox was not found: killed or timed out")

    def _end(self) -> None:
        if self in StandInAsyncSandbox.live:
            StandInAsyncSandbox.live.remove(self)
        self.alive = False
        _kill_tagged(self.sandbox_id)
        if self._netns_holder is not None:
            self._netns_holder.kill()
            self._netns_holder.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    @classmethod
    @mirrors(RealAsyncSandbox.create)
    async def create(cls, a: dict[str, Any]) -> StandInAsyncSandbox:
        network = a["network"]
        if network is not None and set(network) - _keys(SandboxNetworkOpts):
            raise TypeError(
                f"network: unknown keys {sorted(set(network) - _keys(SandboxNetworkOpts))}"
            )
        cls.created.append({k: v for k, v in a.items() if k != "opts"} | a["opts"])
        if cls.create_errors:
            raise cls.create_errors.pop(0)
        key = resolve_idempotency_key(a["idempotency_key"])
        if key is not None and key in cls._by_key:
            return cls._by_key[key]  # E2B answers a repeated key with the same sandbox
        template = a["template"] or RealAsyncSandbox.default_template
        if template not in KNOWN_TEMPLATES:
            raise api_exception_from_code(404, f"template '{template}' not found")
        lifetime = a["timeout"] or RealAsyncSandbox.default_sandbox_timeout
        if lifetime > cls.max_lifetime_s:
            raise api_exception_from_code(
                400, f"Timeout cannot be greater than {cls.max_lifetime_s // 3600} hours"
            )
        box = cls(a["envs"], _egress(a["allow_internet_access"], network))
        cls.live.append(box)
        asyncio.get_running_loop().call_later(lifetime, box._end)
        if key is not None:
            cls._by_key[key] = box
        if cls.take_fault("create_lost"):  # created and billed, but the answer never came
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return box

    @mirrors(RealAsyncSandbox.kill)
    async def kill(self, a: dict[str, Any]) -> bool:
        was_alive = self.alive
        await asyncio.to_thread(self._end)
        return was_alive

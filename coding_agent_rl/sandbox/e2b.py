"""E2B backend over the ``e2b`` SDK's ``AsyncSandbox`` (``pip install 'coding-agent-rl[e2b]'``).

Image routing by metadata key or template, the three network modes (egress filter for
``adapter-only``), a time-to-live per sandbox instead of reaping, and retries with an
idempotency key on create: docs/modules/sandbox.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import ipaddress
import posixpath
import random
import shlex
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import e2b
import httpx
import tenacity

from coding_agent_rl import settings
from coding_agent_rl.sandbox.base import (
    DEFAULT_OUTPUT_CAP,
    ExecResult,
    ImageNotFound,
    NetworkNeedsAddress,
    NetworkUnsupported,
    Sandbox,
    SandboxCreateError,
    SandboxError,
    SandboxFileNotFound,
    SandboxGone,
)
from coding_agent_rl.sandbox.capture import CappedBuffer
from coding_agent_rl.sandbox.options import parse_options
from coding_agent_rl.sandbox.reaper import TOKEN_ENV, kill_command, new_token, session_wrapped

T = TypeVar("T")
# The SDK class every call goes through; tests swap in a stand-in with the same surface.
AsyncSandbox = e2b.AsyncSandbox

UPLOAD_MIN_RATE = 1 << 20  # bytes/s: the slowest link an upload's timeout allows for
ALL_TRAFFIC = "0.0.0.0/0"


class _Never(Exception):
    """Stands for an exception class this SDK version does not have."""


def _sdk_error(name: str) -> type[Exception]:
    return getattr(e2b, name, _Never)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The connection-level errors of the libraries under the SDK: connectrpc (envd's command
    and filesystem streams) and pyqwest (its HTTP transport); httpx's are always there."""
    found: list[type[BaseException]] = [httpx.TransportError, ConnectionError]
    with contextlib.suppress(ImportError):
        import pyqwest

        found += [pyqwest.ReadError, pyqwest.WriteError, pyqwest.StreamError]
    return tuple(found)


try:
    from connectrpc.code import Code
    from connectrpc.errors import ConnectError

    # envd stream codes that say the connection, not the request, failed.
    _CONNECT_TRANSIENT = frozenset(
        {
            Code.UNAVAILABLE,
            Code.UNKNOWN,
            Code.ABORTED,
            Code.INTERNAL,
            Code.RESOURCE_EXHAUSTED,
            Code.DEADLINE_EXCEEDED,
        }
    )
except ImportError:  # an SDK from before connectrpc
    ConnectError = _Never  # type: ignore[assignment,misc]
    _CONNECT_TRANSIENT = frozenset()

# The sandbox is gone (killed, expired): retrying cannot help.
_GONE = (_sdk_error("SandboxNotRunningException"), _sdk_error("SandboxNotFoundException"))
# E2B refused the call: nothing was done, so even a non-idempotent call may be sent again.
_REFUSED = (_sdk_error("RateLimitException"), _sdk_error("ServiceBusyException"))
# The request may not have reached the sandbox, or its answer was lost.
_TRANSPORT = (*_transport_errors(), _sdk_error("SandboxUnreachableException"), *_REFUSED)


@dataclasses.dataclass
class E2BOptions:
    template: str | None = None  # default: the image (or $SLIME_AGENT_E2B_TEMPLATE, see above)
    # The sandbox's time-to-live in E2B (the SDK's timeout): a dead run's sandboxes expire.
    lifetime_s: int | None = None  # default: settings.e2b_lifetime_s
    max_lifetime_s: int | None = None  # the plan's maximum; default settings.e2b_max_lifetime_s
    api_key: str | None = None  # default: $E2B_API_KEY (read by the SDK)
    metadata: dict[str, str] | None = None
    env: dict[str, str] | None = None  # environment of every command
    workdir: str | None = None  # default cwd of execs
    output_cap: int = DEFAULT_OUTPUT_CAP
    retries: int = 3  # transport retries (idempotent calls only)
    network: str = "open"  # "open" | "none" | "adapter-only" (then allow_out is required)
    allow_out: list[str] | None = None  # adapter-only: the addresses (IPs, CIDRs) allowed
    dns: bool = False  # adapter-only: names in allow_out, E2B's public resolver reachable
    upload_timeout_s: float = 600.0  # the least request timeout of an upload (see upload_timeout)


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=64)
def resolve_adapter(name: str) -> str:
    """The IPv4 address of ``name`` as this host resolves it (once per process, so the filter
    and the agent's URL agree); raises :class:`NetworkUnsupported` when it does not resolve."""
    try:
        infos = socket.getaddrinfo(name, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except OSError as e:
        raise NetworkUnsupported(
            f"ADAPTER_PUBLIC_HOST={name!r} does not resolve on this host ({e}); give the "
            "adapter's IP address (or set CODING_AGENT_RL_E2B_ADAPTER_DNS=1 to let E2B resolve it)"
        ) from None
    return str(infos[0][4][0])


def upload_timeout(size: int, floor: float) -> float:
    """An upload's request timeout: ``floor`` seconds, more for what a 1 MiB/s link needs."""
    return max(floor, size / UPLOAD_MIN_RATE)


def transient(e: BaseException) -> bool:
    """Whether ``e`` says the call may not have happened (or its answer was lost)."""
    if isinstance(e, _GONE):
        return False
    if isinstance(e, ConnectError):
        return e.code in _CONNECT_TRANSIENT
    if isinstance(e, (*_TRANSPORT, e2b.TimeoutException)):
        return True
    status = getattr(e, "status_code", None)
    return isinstance(e, e2b.SandboxException) and status is not None and status >= 500


def _backoff(state: tenacity.RetryCallState) -> float:
    """0.5 s doubling per attempt up to 8 s, times 1-2 (jitter: many sandboxes retry at once)."""
    return min(8.0, 0.5 * 2 ** (state.attempt_number - 1)) * (1 + random.random())


def _accepts(method: Any, name: str) -> bool:
    return name in inspect.signature(method).parameters


class E2BSandbox(Sandbox):
    backend = "e2b"
    idle_is_free = False  # billed per sandbox-second: grading is not prepared ahead

    def __init__(self, image: str, **options: Any):
        self.opts = parse_options(E2BOptions, self.backend, options)
        if self.opts.network not in ("open", "none", "adapter-only"):
            raise ValueError(
                f"option 'network' of the e2b sandbox: open, none or adapter-only, "
                f"got {self.opts.network!r}"
            )
        if self.opts.network == "adapter-only" and not self.opts.allow_out:
            raise ValueError("e2b network 'adapter-only' needs allow_out (the adapter's address)")
        names = [a for a in self.opts.allow_out or [] if not _is_address(a)]
        if names and not self.opts.dns:
            raise ValueError(
                f"e2b allow_out names {', '.join(names)}: a name needs DNS, which opens E2B's "
                "public resolver to the sandbox; give IP addresses, or set option dns=true"
            )
        super().__init__(image, output_cap=self.opts.output_cap)
        conf = settings.current()
        self.lifetime_s = self.opts.lifetime_s or conf.e2b_lifetime_s
        most = self.opts.max_lifetime_s or conf.e2b_max_lifetime_s
        if self.lifetime_s > most:
            raise ValueError(
                f"e2b sandbox lifetime {self.lifetime_s} s exceeds the plan's maximum {most} s "
                "(options lifetime_s / max_lifetime_s, CODING_AGENT_RL_E2B_LIFETIME_S / "
                "CODING_AGENT_RL_E2B_MAX_LIFETIME_S)"
            )
        self.metadata = dict(self.opts.metadata or {})
        if key := conf.e2b_metadata_key:
            self.metadata[key] = image
            self.template = self.opts.template or conf.e2b_template
        else:
            self.template = self.opts.template or image
        # One key for every attempt of this sandbox's create (E2B: lowercase, digits, hyphens).
        self.idempotency_key = str(uuid.uuid4())
        self._sbx: Any = None

    @property
    def sandbox_id(self) -> str:
        return self._sbx.sandbox_id if self._sbx is not None else ""

    async def _retry(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        idempotent: bool,
        again: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """``call``, again after a transient error when ``idempotent`` (``again``: a predicate
        that replaces :func:`transient`)."""
        retry_on = again or transient
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.opts.retries + 1),
            wait=_backoff,
            retry=tenacity.retry_if_exception(lambda e: idempotent and retry_on(e)),
            reraise=True,
        ):
            with attempt:
                try:
                    return await call()
                except _GONE as e:
                    raise SandboxGone(f"e2b sandbox {self.sandbox_id} is gone: {e}") from e
        raise AssertionError("unreachable")

    # ---- capabilities ----------------------------------------------------------------------------
    @classmethod
    def public_host(cls, network: str = "bridge") -> str:
        """The adapter's address; with ``adapter-only`` a name is resolved here (no DNS inside)
        unless ``CODING_AGENT_RL_E2B_ADAPTER_DNS`` is set."""
        host = super().public_host(network)
        if network != "adapter-only" or _is_address(host) or settings.current().e2b_adapter_dns:
            return host
        return resolve_adapter(host)

    @classmethod
    def network_options(cls, mode: str, adapter_host: str | None = None) -> dict[str, Any]:
        params = inspect.signature(AsyncSandbox.create).parameters
        if mode == "open":
            return {"network": "open"}
        if mode == "none":
            if "allow_internet_access" not in params:
                raise NetworkUnsupported("this e2b SDK cannot turn the internet off")
            return {"network": "none"}
        if mode == "adapter-only":
            if "network" not in params:
                raise NetworkUnsupported("this e2b SDK has no egress filter (network=...)")
            if not adapter_host:
                raise NetworkNeedsAddress("adapter-only on e2b needs the adapter's public address")
            if not _is_address(adapter_host):
                if settings.current().e2b_adapter_dns:
                    return {"network": "adapter-only", "allow_out": [adapter_host], "dns": True}
                adapter_host = resolve_adapter(adapter_host)
            return {"network": "adapter-only", "allow_out": [adapter_host]}
        raise NetworkUnsupported(f"unknown network mode {mode!r}")

    def _network_kwargs(self) -> dict[str, Any]:
        if self.opts.network == "none":
            return {"allow_internet_access": False}
        if self.opts.network == "adapter-only":
            return {
                "network": {
                    "allow_out": list(self.opts.allow_out or []),
                    "deny_out": [ALL_TRAFFIC],
                    # No resolver at all unless a name must be resolved (then E2B's default).
                    **({} if self.opts.dns else {"dns_servers": []}),
                }
            }
        return {}

    # ---- lifecycle ---------------------------------------------------------------------------
    async def _create(self) -> None:
        kwargs: dict[str, Any] = {
            "template": self.template,
            # A time-to-live: should this process die, E2B removes the sandbox by itself.
            "timeout": self.lifetime_s,
            "metadata": self.metadata or None,
            "envs": self.opts.env,
            **self._network_kwargs(),
        }
        if self.opts.api_key:
            kwargs["api_key"] = self.opts.api_key
        again: Callable[[BaseException], bool] = transient
        if _accepts(AsyncSandbox.create, "idempotency_key"):
            kwargs["idempotency_key"] = self.idempotency_key  # a retry gets the same sandbox
        else:  # a lost answer may have made a sandbox: only a refusal is safe to send again
            again = lambda e: isinstance(e, _REFUSED)  # noqa: E731
        try:
            self._sbx = await self._retry(
                lambda: AsyncSandbox.create(**kwargs), idempotent=True, again=again
            )
        except Exception as e:
            status = getattr(e, "status_code", None)
            if isinstance(e, e2b.NotFoundException) or status == 404:
                raise ImageNotFound(
                    f"e2b template {self.template!r} not found (image {self.image!r}); build it "
                    "with the E2B CLI: e2b template build"
                ) from e
            raise SandboxCreateError(f"e2b: cannot create a sandbox: {e}") from e

    async def _destroy(self) -> None:
        if self._sbx is not None:
            await self._retry(self._sbx.kill, idempotent=True)

    # ---- exec ----------------------------------------------------------------------------------
    async def _start(
        self,
        cmd: str,
        user: str,
        envs: dict[str, str],
        cwd: str | None,
        out: CappedBuffer,
        err: CappedBuffer,
    ) -> Any:
        kwargs: dict[str, Any] = {}
        if _accepts(self._sbx.commands.run, "retain_output"):
            kwargs["retain_output"] = False  # our capped buffers keep the output
        return await self._sbx.commands.run(
            session_wrapped(cmd),
            background=True,
            envs=envs,
            user=user,
            cwd=cwd,
            on_stdout=out.append,
            on_stderr=err.append,
            timeout=0,
            **kwargs,
        )

    async def _reap(self, token: str, handle: Any) -> None:
        with contextlib.suppress(Exception):
            await self._sbx.commands.run(
                kill_command(token), user="root", timeout=30, request_timeout=30
            )
        if handle is not None:
            with contextlib.suppress(Exception):
                await handle.kill()

    async def _exec_once(
        self,
        cmd: str,
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        timeout: float | None,
    ) -> ExecResult:
        start = time.monotonic()
        token = new_token()
        envs = {**(self.opts.env or {}), **(env or {}), TOKEN_ENV: token}
        out, err = CappedBuffer(self.output_cap), CappedBuffer(self.output_cap)
        try:
            handle = await self._start(cmd, user, envs, cwd or self.opts.workdir, out, err)
        except BaseException:  # the answer may be what was lost: the command may be running
            await asyncio.shield(self._reap(token, None))
            raise
        waiter = asyncio.ensure_future(handle.wait())
        try:
            result = await asyncio.wait_for(asyncio.shield(waiter), timeout)
            code = result.exit_code
        except e2b.CommandExitException as e:
            code = e.exit_code
        except asyncio.TimeoutError:
            await self._reap(token, handle)
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(waiter, 5)
            with contextlib.suppress(Exception):
                await handle.disconnect()
            return ExecResult(124, out.text(), err.text(), True, time.monotonic() - start)
        except asyncio.CancelledError:
            await asyncio.shield(self._reap(token, handle))
            raise
        except Exception:
            await self._reap(token, handle)  # never leave a half-watched command running
            raise
        return ExecResult(code, out.text(), err.text(), False, time.monotonic() - start)

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
        try:
            return await self._retry(
                lambda: self._exec_once(cmd, user, env, cwd, timeout), idempotent=idempotent
            )
        except SandboxError:
            raise
        except Exception as e:
            raise SandboxError(f"e2b exec failed: {e}") from e

    # ---- files ---------------------------------------------------------------------------------
    async def _write(self, path: str, data: bytes, *, user: str, mode: int | None) -> None:
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox paths must be absolute: {path!r}")
        kwargs: dict[str, Any] = {
            "request_timeout": upload_timeout(len(data), self.opts.upload_timeout_s)
        }
        if _accepts(self._sbx.files.write, "use_octet_stream"):
            kwargs["use_octet_stream"] = True  # the raw bytes, not a multipart form
        try:
            await self._retry(
                lambda: self._sbx.files.write(path, data, user=user, **kwargs), idempotent=True
            )
        except SandboxError:
            raise
        except Exception as e:
            raise SandboxError(f"cannot write {path} as {user}: {e}") from e
        # The files API has no mode: one more round trip when a mode is asked for.
        if mode is not None:
            result = await self._exec(
                f"chmod {oct(mode)[2:]} -- {shlex.quote(path)}",
                user=user,
                env=None,
                cwd=None,
                timeout=60,
                idempotent=True,
            )
            if result.exit_code != 0:
                raise SandboxError(f"cannot chmod {path}: {result.stderr.strip()}")

    async def _read(self, path: str, *, user: str) -> bytes:
        if not posixpath.isabs(path):
            raise ValueError(f"sandbox paths must be absolute: {path!r}")
        try:
            data = await self._retry(
                lambda: self._sbx.files.read(path, format="bytes", user=user), idempotent=True
            )
        except SandboxError:
            raise
        except e2b.NotFoundException as e:
            raise SandboxFileNotFound(f"{path}: no such file in the sandbox") from e
        except Exception as e:
            raise SandboxError(f"cannot read {path} as {user}: {e}") from e
        return bytes(data)

"""E2B backend over the ``e2b`` SDK's ``AsyncSandbox`` (``pip install 'coding-agent-rl[e2b]'``).

Image routing: with ``SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY`` set (slime's convention for
gateways that route by metadata), the image goes into the sandbox metadata under that key and the
template comes from option ``template`` or ``SLIME_AGENT_E2B_TEMPLATE`` (else the SDK default);
otherwise the image *is* the template. Commands run as the leader of a new session, so a timeout
kills everything they started (:mod:`coding_agent_rl.sandbox.reaper`).

Network (``network`` option): ``open`` (E2B's default: the internet), ``none`` (the SDK's
internet switch off: ``allow_internet_access=False``; grading uses it) and ``adapter-only``
(the SDK's egress filter: ``allow_out`` = the adapter's public address, everything else denied,
no DNS server). What E2B cannot enforce: the filter works on addresses, not ports (every port of
the adapter's host answers), and the adapter must be reachable from E2B's cloud, i.e. listen on
a public address. Memory, CPUs and disk come with the template, not per sandbox.

Orphans: every sandbox is created with a time-to-live (option ``lifetime_s``, default
``settings.e2b_lifetime_s``, above the rollout deadline), so the sandboxes of a run that died
without closing them expire in E2B by themselves; there is nothing to reap from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import ipaddress
import posixpath
import random
import shlex
import time
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


class _Never(Exception):
    """Stands for an exception class this SDK version does not have."""


def _sdk_error(name: str) -> type[Exception]:
    return getattr(e2b, name, _Never)


# The sandbox is gone (killed, expired): retrying cannot help.
_GONE = (_sdk_error("SandboxNotRunningException"), _sdk_error("SandboxNotFoundException"))
# The request may not have reached the sandbox, or its answer was lost.
_TRANSPORT = (
    httpx.TransportError,
    _sdk_error("SandboxUnreachableException"),
    _sdk_error("RateLimitException"),
    _sdk_error("ServiceBusyException"),
)


@dataclasses.dataclass
class E2BOptions:
    template: str | None = None  # default: the image (or $SLIME_AGENT_E2B_TEMPLATE, see above)
    # The sandbox's time-to-live in E2B (the SDK's timeout): a dead run's sandboxes expire.
    lifetime_s: int | None = None  # default: settings.e2b_lifetime_s
    api_key: str | None = None  # default: $E2B_API_KEY (read by the SDK)
    metadata: dict[str, str] | None = None
    env: dict[str, str] | None = None  # environment of every command
    workdir: str | None = None  # default cwd of execs
    output_cap: int = DEFAULT_OUTPUT_CAP
    retries: int = 3  # transport retries (idempotent calls only)
    network: str = "open"  # "open" | "none" | "adapter-only" (then allow_out is required)
    allow_out: list[str] | None = None  # adapter-only: the addresses (IPs, CIDRs, names) allowed


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return True


def _transient(e: BaseException) -> bool:
    if isinstance(e, _GONE):
        return False
    if isinstance(e, (*_TRANSPORT, e2b.TimeoutException)):
        return True
    status = getattr(e, "status_code", None)
    return isinstance(e, e2b.SandboxException) and status is not None and status >= 500


def _backoff(state: tenacity.RetryCallState) -> float:
    """0.5 s doubling per attempt up to 8 s, times 1-2 (jitter: many sandboxes retry at once)."""
    return min(8.0, 0.5 * 2 ** (state.attempt_number - 1)) * (1 + random.random())


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
        super().__init__(image, output_cap=self.opts.output_cap)
        self.metadata = dict(self.opts.metadata or {})
        conf = settings.current()
        if key := conf.e2b_metadata_key:
            self.metadata[key] = image
            self.template = self.opts.template or conf.e2b_template
        else:
            self.template = self.opts.template or image
        self._sbx: Any = None

    @property
    def sandbox_id(self) -> str:
        return self._sbx.sandbox_id if self._sbx is not None else ""

    async def _retry(self, call: Callable[[], Awaitable[T]], *, idempotent: bool) -> T:
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.opts.retries + 1),
            wait=_backoff,
            retry=tenacity.retry_if_exception(lambda e: idempotent and _transient(e)),
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
            return {"network": "adapter-only", "allow_out": [adapter_host]}
        raise NetworkUnsupported(f"unknown network mode {mode!r}")

    def _network_kwargs(self) -> dict[str, Any]:
        if self.opts.network == "none":
            return {"allow_internet_access": False}
        if self.opts.network == "adapter-only":
            allow = list(self.opts.allow_out or [])
            names = any(not _is_address(a) for a in allow)
            return {
                "network": {
                    "allow_out": allow,
                    "deny_out": ["0.0.0.0/0"],
                    # No DNS server unless a name must be resolved (then E2B's default).
                    **({} if names else {"dns_servers": []}),
                }
            }
        return {}

    # ---- lifecycle ---------------------------------------------------------------------------
    async def _create(self) -> None:
        kwargs: dict[str, Any] = {
            "template": self.template,
            # A time-to-live: should this process die, E2B removes the sandbox by itself.
            "timeout": self.opts.lifetime_s or settings.current().e2b_lifetime_s,
            "metadata": self.metadata or None,
            "envs": self.opts.env,
            **self._network_kwargs(),
        }
        if self.opts.api_key:
            kwargs["api_key"] = self.opts.api_key
        try:
            self._sbx = await self._retry(lambda: AsyncSandbox.create(**kwargs), idempotent=True)
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
        if "retain_output" in inspect.signature(self._sbx.commands.run).parameters:
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
            await self._sbx.commands.run(kill_command(token), user="root", timeout=30)
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
        handle = await self._start(cmd, user, envs, cwd or self.opts.workdir, out, err)
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
        try:
            await self._retry(lambda: self._sbx.files.write(path, data, user=user), idempotent=True)
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

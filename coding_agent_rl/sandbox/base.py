"""The sandbox contract: one instance is one isolated environment.

Backends subclass :class:`Sandbox` and implement the five ``_``-prefixed primitives; the public
methods add the shared behaviour (closed-state checks, idempotent teardown, output caps).
Callers ask capabilities (where it runs, network, files, limits, leftovers, image kind, copies) of the
class or object, never compare backend names: docs/modules/sandbox.md.
Every creation passes admission control (:mod:`admission`).
"""

from __future__ import annotations

import abc
import asyncio
import collections
import logging
import pathlib
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from coding_agent_rl import settings
from coding_agent_rl.errors import SandboxCreateError, SandboxError, UserError
from coding_agent_rl.sandbox import admission

if TYPE_CHECKING:
    from coding_agent_rl.limits import Limits

DEFAULT_OUTPUT_CAP = 10 * 1024 * 1024
TRUNCATION_MARKER = "\n[... output truncated by coding-agent-rl: {n} bytes dropped ...]\n"


class ImageNotFound(SandboxCreateError):
    """The image does not exist; the message names the command that builds it."""


class SandboxGone(SandboxError):
    """The sandbox was closed, killed or vanished."""


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """``read_file`` on a path that does not exist."""


NETWORK_MODES = ("adapter-only", "open", "none")


class NetworkUnsupported(UserError, ValueError):
    """The backend cannot give its sandboxes the asked-for network mode (the message says why)."""


class NetworkNeedsAddress(NetworkUnsupported):
    """The mode needs the adapter's address as the sandbox sees it (``adapter_host``)."""


class ExecResult(NamedTuple):
    """Unpacks like slime's ``(exit_code, stdout, stderr)`` through ``[:3]``."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class CommandFailed(SandboxError):
    """``exec(check=True)`` saw a non-zero exit."""

    def __init__(self, cmd: str, result: ExecResult):
        tail = (result.stderr or result.stdout)[-2000:]
        super().__init__(f"command failed (exit {result.exit_code}): {cmd!r}: {tail}")
        self.result = result


def to_bytes(content: str | bytes | pathlib.Path) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, pathlib.Path):
        return content.read_bytes()
    return content.encode()


log = logging.getLogger(__name__)
TEARDOWN_FAILURES: collections.Counter[str] = collections.Counter()  # backend -> failed destroys


def teardown_failed(sb: Sandbox, error: BaseException) -> None:
    """Log a failed destroy with the sandbox id and count it (a run's metrics report the
    count: ``sandbox_teardown_failures_total``)."""
    TEARDOWN_FAILURES[sb.backend] += 1
    log.error(
        "sandbox teardown failed: %s sandbox %s (image %s): %s: %s; it may have leaked "
        "(`coding-agent-rl sandboxes gc` removes leftovers)",
        sb.backend,
        sb.sandbox_id or "?",
        sb.image,
        type(error).__name__,
        error,
    )


class Sandbox(abc.ABC):
    """Async context manager around one isolated environment."""

    backend: ClassVar[str] = "?"
    # The resource limits (``limits.RESOURCE_KEYS``) this backend enforces per sandbox, as
    # options of those names; and whether option ``writable`` lists the paths its processes
    # write (put on the capped disk).
    limit_names: ClassVar[tuple[str, ...]] = ()
    takes_writable: ClassVar[bool] = False
    # An idle sandbox costs nothing (not billed per sandbox-second): grading sandboxes are
    # created and prepared while the agent runs.
    idle_is_free: ClassVar[bool] = True
    # The image is seen read-only but for the paths of option ``writable`` (task sandboxes add
    # what they write besides their workdir: sandbox/task.py).
    read_only_image: ClassVar[bool] = False
    # What ``coding-agent-rl images`` builds for it: "docker" images, "rootfs" directories, or
    # None (the provider builds them, e.g. E2B templates).
    image_kind: ClassVar[str | None] = None
    # The limits that apply to this sandbox (None: the backend enforces none of its own).
    limits: Limits | None = None

    def __init__(self, image: str, *, output_cap: int = DEFAULT_OUTPUT_CAP):
        self.image = image
        self.output_cap = output_cap
        self._state = "new"  # new -> open -> closed
        self._close_lock = asyncio.Lock()
        self._after_close: list[Callable[[], Awaitable[None]]] = []

    # ---- primitives every backend implements -------------------------------------------------
    @property
    @abc.abstractmethod
    def sandbox_id(self) -> str: ...

    @abc.abstractmethod
    async def _create(self) -> None: ...

    @abc.abstractmethod
    async def _destroy(self) -> None: ...

    @abc.abstractmethod
    async def _exec(
        self,
        cmd: str,
        *,
        user: str,
        env: dict[str, str] | None,
        cwd: str | None,
        timeout: float | None,
        idempotent: bool,
    ) -> ExecResult: ...

    @abc.abstractmethod
    async def _write(self, path: str, data: bytes, *, user: str, mode: int | None) -> None: ...

    @abc.abstractmethod
    async def _read(self, path: str, *, user: str) -> bytes: ...

    # ---- capabilities (defaults: a remote backend that knows no better) -------------------------
    @classmethod
    def is_local(cls) -> bool:
        """Its sandboxes run on this machine: host paths can be bind-mounted, uploads never
        leave the machine (sent uncompressed)."""
        return False

    @classmethod
    def supports_bind_mounts(cls) -> bool:
        """Option ``mounts`` (host path -> sandbox path, read-only) works here."""
        return False

    @classmethod
    async def reap_orphans(cls) -> dict[str, int]:
        """Remove this backend's sandboxes (and what they leave: volumes, disks, folders) whose
        owner process is gone (:mod:`coding_agent_rl.sandbox.owner`); how many of each went.
        Default: nothing to do (a cloud backend's sandboxes expire by their time-to-live)."""
        return {}

    @property
    def mounts(self) -> dict[str, str]:
        """The read-only bind mounts of this sandbox, host path -> sandbox path."""
        return {}

    @classmethod
    def adapter_bind_host(cls, network: str = "bridge") -> str:
        """The host address a listener for this backend's sandboxes binds to
        (``settings.adapter_bind_host`` wins). ``network``: the sandboxes' network option."""
        return settings.current().adapter_bind_host or cls._default_bind_host(network)

    @classmethod
    def _default_bind_host(cls, network: str) -> str:
        return "0.0.0.0"  # remote sandboxes connect from outside this machine

    @classmethod
    def host_address(cls, network: str = "bridge") -> str | None:
        """How a program inside reaches this machine (None: unknown, e.g. a cloud sandbox)."""
        return None

    @classmethod
    def public_host(cls, network: str = "bridge") -> str:
        """This machine's address as a program inside sees it (``settings.adapter_public_host``
        wins); raises :class:`NetworkUnsupported` when it is unknown there."""
        host = settings.current().adapter_public_host or cls.host_address(network)
        if not host:
            raise NetworkUnsupported(
                f"sandboxes of backend {cls.backend!r} cannot reach this machine by a known "
                "address: set ADAPTER_PUBLIC_HOST to a host name or IP they can connect to"
            )
        return host

    @classmethod
    def host_url(cls, port: int, network: str = "bridge") -> str:
        """``http://HOST:PORT`` for a port bound at :meth:`adapter_bind_host`, as a program
        inside sees it (no ``/v1``: each harness appends what its CLI needs)."""
        host = cls.public_host(network)
        if ":" in host and not host.startswith("["):  # a bare IPv6 address
            host = f"[{host}]"
        return f"http://{host}:{port}"

    @classmethod
    def network_options(cls, mode: str, adapter_host: str | None = None) -> dict[str, Any]:
        """Backend options for the agent-network ``mode`` (one of :data:`NETWORK_MODES`):
        ``adapter-only`` (only the adapter answers; ``adapter_host`` is where it listens, for
        backends that filter by address), ``open`` (the backend's default network), ``none``.
        Raises :class:`NetworkUnsupported` naming what this backend cannot do."""
        if mode == "open":
            return {}
        raise NetworkUnsupported(f"the {cls.backend} sandbox cannot enforce network {mode!r}")

    @classmethod
    def listens_inside(cls) -> bool:
        """Whether :meth:`listen` works: ``adapter-only`` then serves the adapter on a socket
        inside each sandbox (``http://127.0.0.1:PORT`` there) instead of a host address."""
        return False

    async def listen(self, port: int) -> socket.socket:
        """A listening TCP socket on ``127.0.0.1:port`` inside this sandbox's network namespace,
        for the caller to serve (see :meth:`listens_inside`)."""
        raise SandboxError(f"the {self.backend} sandbox cannot host a listener")

    @classmethod
    def supports_snapshot(cls) -> bool:
        """:meth:`snapshot` works: a prepared sandbox can be copied (docs/sandbox-pool.md)."""
        return False

    async def snapshot(self, **options: Any) -> Any:
        """Freeze this sandbox's files into a :class:`~coding_agent_rl.sandbox.snapshot.Snapshot`
        whose copies start with them (``options``: the copies' sandbox options). The snapshot
        owns this sandbox from then on (closed now, or by ``await snap.remove()``, which the
        caller owes once the copies are gone)."""
        raise SandboxError(f"the {self.backend} sandbox cannot be snapshotted")

    @classmethod
    def template_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options of a sandbox made to be snapshotted, from a copy's ``options``."""
        return dict(options)

    def after_close(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run ``callback`` once this sandbox is destroyed (e.g. release its snapshot)."""
        self._after_close.append(callback)

    async def limit_breaches(self) -> list[str]:
        """The resource limits this sandbox has hit so far, one line each naming the limit
        (e.g. ``"memory limit 4 GiB exceeded (1 OOM kill(s))"``); [] when none (or unknown)."""
        return []

    async def cpu_seconds(self) -> float | None:
        """CPU seconds used so far by every process of this sandbox (its control group's
        accounting, read on this host); None when the backend cannot tell."""
        return None

    @property
    def boot_limit(self) -> int | None:
        """This sandbox's cap on creations in flight (None: the settings' ``boot_concurrency``)."""
        return None

    # ---- shared behaviour ----------------------------------------------------------------------
    async def __aenter__(self) -> Sandbox:
        if self._state != "new":
            raise SandboxError(f"{self.backend} sandbox already used; create a new one")
        try:
            async with admission.creating(self.backend, self.boot_limit):
                await self._create()
        except BaseException:
            await asyncio.shield(self._safe_destroy())
            raise
        self._state = "open"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Destroy the sandbox; idempotent and safe under cancellation."""
        await asyncio.shield(self._close_once())

    async def _close_once(self) -> None:
        async with self._close_lock:
            if self._state == "closed":
                return
            self._state = "closed"
            await self._safe_destroy()
            for callback in self._after_close:
                try:
                    await callback()
                except Exception:
                    log.exception("after-close callback of %s sandbox failed", self.backend)

    async def _safe_destroy(self) -> None:
        """Destroy; a failure is logged with the sandbox id and counted (a leak must show)."""
        try:
            await self._destroy()
        except Exception as e:
            teardown_failed(self, e)

    def _check_open(self) -> None:
        if self._state != "open":
            raise SandboxGone(f"{self.backend} sandbox {self.sandbox_id or '?'} is {self._state}")

    async def exec(
        self,
        cmd: str,
        *,
        user: str = "root",
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 120,
        check: bool = False,
        idempotent: bool = True,
    ) -> ExecResult:
        """Run ``cmd`` with ``bash -c``. Never raises for a non-zero exit unless ``check``.

        A timeout kills the whole process group and returns ``timed_out=True`` with exit 124.
        """
        self._check_open()
        result = await self._exec(
            cmd,
            user=user,
            env=env,
            cwd=cwd,
            timeout=timeout if timeout and timeout > 0 else None,  # <= 0: no limit
            idempotent=idempotent,
        )
        if check and not result.ok:
            raise CommandFailed(cmd, result)
        return result

    async def write_file(
        self,
        path: str,
        content: str | bytes | pathlib.Path,
        *,
        user: str = "root",
        mode: int | None = None,
    ) -> None:
        """Write ``content`` to ``path``, creating parent directories; binary-safe."""
        self._check_open()
        await self._write(path, to_bytes(content), user=user, mode=mode)

    async def read_file(
        self, path: str, *, user: str = "root", binary: bool = False
    ) -> str | bytes:
        """Read ``path``; a missing file raises :class:`SandboxFileNotFound`."""
        self._check_open()
        data = await self._read(path, user=user)
        return data if binary else data.decode("utf-8", "replace")

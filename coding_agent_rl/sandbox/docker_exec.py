"""Docker exec, blocking (run on the engine's thread pool): stream one command's output into
capped buffers, notice its exit, and kill everything it started (see :mod:`reaper`)."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import docker.errors

from coding_agent_rl.sandbox import docker_engine as engine
from coding_agent_rl.sandbox.base import SandboxError, SandboxGone
from coding_agent_rl.sandbox.capture import CappedBuffer
from coding_agent_rl.sandbox.reaper import kill_argv


class ExecRun:
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
            _shutdown(stream)

    def detach(self) -> None:
        """The stream is read to its end: close its connection (the SDK leaves that to the
        garbage collector)."""
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            _close(stream)

    def cancel(self) -> None:
        """Stop reading: shut the connection down, which ends the reader thread's loop (it
        closes the response itself, in :meth:`detach`; closing it here would fail its read)."""
        with self._lock:
            self._cancelled = True
            stream = self._stream
        if stream is not None:
            _shutdown(stream)

    @property
    def cancelled(self) -> bool:
        return self._cancelled


def _shutdown(stream: Any) -> None:
    """Shut the exec's socket down: a read in progress returns end of stream."""
    try:
        stream.close()
    except OSError:
        pass  # already gone


def _close(stream: Any) -> None:
    """Shut the exec's socket down, then close the raw HTTP response that still holds it (only
    the reader, once done reading). Not ``Response.close()``: that would hand the hijacked
    connection back to the pool."""
    _shutdown(stream)
    response = getattr(stream, "_response", None)  # docker.types.CancellableStream's
    if response is not None:
        response.raw.close()


def run_exec(
    cid: str,
    name: str,
    argv: list[str],
    user: str,
    env: dict[str, str] | None,
    cwd: str | None,
    run: ExecRun,
) -> int:
    """Blocking: create, stream and inspect one exec in container ``cid`` (``name``: its short
    id, for messages); returns its exit code."""
    api = engine.client().api
    try:
        try:
            created = api.exec_create(
                cid,
                argv,
                stdout=True,
                stderr=True,
                user=user,
                environment=env,
                workdir=cwd,
            )
        except docker.errors.APIError as e:
            if e.status_code in (404, 409):  # no such container / not running
                raise SandboxGone(f"docker sandbox {name} is gone: {e}") from e
            raise
        run.started = True  # from here on the command may be running
        stream = api.exec_start(created["Id"], stream=True, demux=True)
        run.attach(stream)
        try:
            for kind, chunk in frames(_response_file(stream)):
                (run.out if kind == 1 else run.err).append(chunk)
        finally:
            run.detach()
        polls = 0
        while True:
            info = api.exec_inspect(created["Id"])
            # The stream ends when the command closes its stdout/stderr, which can precede
            # its exit by a little.
            if not info["Running"] or run.cancelled:
                break
            polls += 1
            if polls % 100 == 0 and not container_running(cid, api):
                # An exec of a dead container can stay "running" forever (e.g. gVisor's kernel
                # OOM-killed): the sandbox is gone, not the command slow.
                raise SandboxGone(f"docker sandbox {name} died while a command ran")
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


def _response_file(stream: Any) -> Any:
    """The buffered file of the HTTP response behind the SDK's exec stream."""
    response = getattr(stream, "_response", None)  # docker.types.CancellableStream's
    fp = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if fp is None:
        raise SandboxError("this docker SDK's exec stream has no HTTP response to read")
    return fp


def frames(fp: Any) -> Iterator[tuple[int, bytes]]:
    """``(stream, bytes)`` of a multiplexed exec stream, read from the HTTP response's buffered
    file, not the bare socket under it (the SDK's way): output that arrived with the response
    head sits in that buffer and would be lost, shifting every frame after it. No socket
    timeout: a quiet command is not a dead one (the caller has its own deadline)."""
    raw = getattr(getattr(fp, "raw", None), "_sock", None)
    if raw is not None:
        raw.settimeout(None)
    while True:
        head = fp.read(8)
        if len(head) < 8:
            return  # end of stream (or the connection was shut down)
        kind, n = struct.unpack(">BxxxL", head)
        if kind not in (1, 2):
            raise SandboxError(f"docker exec stream out of frame (stream id {kind})")
        while n:
            chunk = fp.read1(min(n, 1 << 16))
            if not chunk:
                return
            n -= len(chunk)
            yield kind, chunk


def container_running(cid: str, api: Any = None) -> bool:
    api = api or engine.client().api
    try:
        return bool(api.inspect_container(cid)["State"]["Running"])
    except docker.errors.NotFound:
        return False


def reap(cid: str, name: str, token: str, run: ExecRun) -> None:
    """Blocking: kill the exec tagged ``token`` and everything in its session; stop reading."""
    try:
        run_exec(cid, name, kill_argv(token), "root", None, "/", ExecRun(64 * 1024))
    except Exception:
        pass  # the container may be gone, which kills everything anyway
    if not run.finished.wait(5):  # an escaped daemon may still hold the output pipes
        run.cancel()

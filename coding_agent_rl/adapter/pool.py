"""Several adapter processes on one node, behind the one-adapter contract the rollout uses.

With ``adapter_processes`` > 1 the runtime starts an :class:`AdapterPool`: K child processes,
each a whole adapter on its own port; a session belongs to one process (the least loaded at
open) and its sandbox is pointed there (:meth:`AdapterPool.port_for`). Calls go over a pipe; a
child exits when its pipe closes. Details: docs/modules/adapter.md.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.errors import InfraFailure
from coding_agent_rl.trajectory.turn import Turn

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0


# -- the child side --


def _child_main(
    config: AdapterConfig, host: str, log_level: int, conn: Any, fds: socket.socket
) -> None:
    """A child process: one adapter server; answers calls from the pipe until it closes."""
    # Ctrl-C reaches the whole process group: the parent winds its rollouts down and then closes
    # the pipe, which is what ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=log_level, format=f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s"
    )
    loop = asyncio.new_event_loop()
    adapter = AdapterServer(config)
    url = loop.run_until_complete(adapter.start(host, 0))
    threading.Thread(target=loop.run_forever, name="adapter-loop", daemon=True).start()
    listeners: dict[int, Callable[[], Awaitable[None]]] = {}
    send_lock = threading.Lock()
    workers = concurrent.futures.ThreadPoolExecutor(max_workers=16)

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(CALL_TIMEOUT_S)

    def serve(sock: socket.socket, session: str | None, key: int) -> int:
        listeners[key] = on_loop(adapter.serve_socket(sock, session))
        return key

    def stop_listener(key: int) -> None:
        stop = listeners.pop(key, None)
        if stop is not None:
            on_loop(stop())

    async def settled(sid: str, timeout: float) -> bool:
        return await adapter.sessions.settled(sid, timeout)

    sessions, engine = adapter.sessions, adapter.engine
    ops: dict[str, Callable[..., Any]] = {
        "open": sessions.open,
        "close": sessions.close,
        "pop": sessions.pop,
        "turns": sessions.turns,
        "errors": sessions.errors,
        "in_flight": sessions.in_flight,
        "contains": sessions.__contains__,
        "settled": lambda sid, timeout: on_loop(settled(sid, timeout)),
        "aborted": engine.aborted,
        "forget": engine.forget,
        "serve_socket": serve,
        "stop_listener": stop_listener,
    }

    def answer(call_id: int, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            reply: tuple[int, bool, Any] = (call_id, True, ops[op](*args, **kwargs))
        except Exception as e:  # the caller re-raises it
            reply = (call_id, False, e)
        try:
            data = pickle.dumps(reply)
            if not reply[1]:  # an exception whose class cannot be rebuilt would kill the reader
                pickle.loads(data)
        except Exception as e:
            data = pickle.dumps((call_id, False, RuntimeError(f"adapter {op}: {reply[2]!r} ({e})")))
        with send_lock:
            conn.send_bytes(data)

    conn.send(("ready", url, os.getpid()))
    try:
        while True:
            try:
                call_id, op, args, kwargs = conn.recv()
            except (EOFError, OSError):
                break  # the parent is gone
            if op == "serve_socket":  # its descriptor follows on the fd channel, in order
                _, received, _, _ = socket.recv_fds(fds, 1, 1)
                args = (socket.socket(fileno=received[0]), *args)
            workers.submit(answer, call_id, op, args, kwargs)
    finally:
        workers.shutdown(wait=False, cancel_futures=True)
        asyncio.run_coroutine_threadsafe(adapter.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


# -- the parent side --


class AdapterProcessGone(InfraFailure, RuntimeError):
    """An adapter process died (killed, crashed): its sessions' calls fail at once, as ours."""

    def __init__(self, pid: int | None, exitcode: int | None = None):
        how = "" if exitcode is None else f" (exit {exitcode})"
        super().__init__(f"adapter process {pid} is gone{how}", stage="adapter")


class _Child:
    """The parent's end of one adapter process: calls by id, answered on a reader thread."""

    def __init__(self, config: AdapterConfig, host: str):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.fds, child_fds = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = ctx.Process(
            target=_child_main,
            args=(config, host, logging.getLogger().getEffectiveLevel(), child_conn, child_fds),
            name="coding-agent-rl-adapter",
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        child_fds.close()
        self.url = ""
        self.port = 0
        self.sessions = 0  # open sessions assigned here
        self._ids = itertools.count()
        self._waiting: dict[int, concurrent.futures.Future[Any]] = {}
        self._send_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self.gone = False  # its pipe broke: every call fails with AdapterProcessGone

    def ready(self) -> None:
        """Wait for the child's URL, then start reading its answers."""
        if not self.conn.poll(START_TIMEOUT_S):
            raise RuntimeError(f"adapter process {self.process.pid} did not start")
        tag, self.url, _pid = self.conn.recv()
        assert tag == "ready"
        self.port = int(self.url.rsplit(":", 1)[1])
        self._reader = threading.Thread(target=self._read, name="adapter-pool-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self.gone and self.process.is_alive()

    def _gone(self) -> AdapterProcessGone:
        return AdapterProcessGone(self.process.pid, self.process.exitcode)

    def _read(self) -> None:
        while True:
            try:
                call_id, ok, value = self.conn.recv()
            except Exception:  # EOF, a closed pipe, or a reply cut short by a kill
                break
            future = self._waiting.pop(call_id, None)
            if future is not None:
                (future.set_result if ok else future.set_exception)(value)
        with self._send_lock:  # no call is registered after this: submit sees ``gone``
            self.gone = True
            waiting, self._waiting = self._waiting, {}
        self.process.join(1.0)  # a killed child's exit code, for the error
        if waiting:
            log.error("%s: failing %d calls in flight", self._gone(), len(waiting))
        for future in waiting.values():
            future.set_exception(self._gone())

    def submit(
        self, op: str, *args: Any, fd: int | None = None, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._send_lock:
            if self.gone:
                raise self._gone()
            call_id = next(self._ids)
            self._waiting[call_id] = future
            try:
                self.conn.send((call_id, op, args, kwargs))
                if fd is not None:
                    socket.send_fds(self.fds, [b"f"], [fd])
            except (OSError, ValueError) as e:  # a broken pipe: the process died
                self._waiting.pop(call_id, None)
                raise self._gone() from e
        return future

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        return self.submit(op, *args, **kwargs).result(CALL_TIMEOUT_S)

    def stop(self, timeout: float = 10.0) -> None:
        self.conn.close()  # the child's recv ends: it stops its server and exits
        self.fds.close()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)


class PoolSessions:
    """``SessionStore``'s methods the rollout calls, each routed to the session's process."""

    def __init__(self, pool: AdapterPool):
        self._pool = pool

    def open(self, sid: str, **kwargs: Any) -> None:
        self._pool._assign(sid).call("open", sid, **kwargs)

    def close(self, sid: str) -> None:
        child = self._pool._owner.get(sid)
        if child is not None:
            child.call("close", sid)

    def pop(self, sid: str) -> list[Turn]:
        child = self._pool._release(sid)
        return child.call("pop", sid) if child is not None else []

    def turns(self, sid: str) -> list[Turn]:
        child = self._pool._owner.get(sid)
        return child.call("turns", sid) if child is not None else []

    def errors(self, sid: str) -> list[str]:
        child = self._pool._owner.get(sid)
        return child.call("errors", sid) if child is not None else []

    def in_flight(self, sid: str) -> int:
        child = self._pool._owner.get(sid)
        return child.call("in_flight", sid) if child is not None else 0

    async def settled(self, sid: str, timeout: float = 10.0) -> bool:
        child = self._pool._owner.get(sid)
        if child is None:
            return True
        return bool(await asyncio.wrap_future(child.submit("settled", sid, timeout)))

    def __contains__(self, sid: str) -> bool:
        return sid in self._pool._owner


class PoolEngine:
    """The ``TurnEngine`` calls the rollout makes (``AbortWatch`` + ``forget``)."""

    def __init__(self, pool: AdapterPool):
        self._pool = pool

    def aborted(self, sid: str) -> str | None:
        child = self._pool._owner.get(sid)
        return child.call("aborted", sid) if child is not None else None

    def forget(self, sid: str) -> None:
        child = self._pool._owner.get(sid)
        if child is not None:
            child.call("forget", sid)


class AdapterPool:
    """``processes`` adapter processes serving ``config`` (its tokenizer a spec, its vision a
    path: both travel to the children), each on its own port of ``host``."""

    def __init__(self, processes: int, config: AdapterConfig | None = None, **fields: Any):
        if processes < 1:
            raise ValueError("an adapter pool needs at least one process")
        if config is None:
            config = AdapterConfig(**fields)
        if config.renderer is not None or not isinstance(config.tokenizer, str):
            raise ValueError("an adapter pool takes a tokenizer spec, not a tokenizer object")
        self.processes = processes
        self.config = config
        self.sessions = PoolSessions(self)
        self.engine = PoolEngine(self)
        self._children: list[_Child] = []
        self._owner: dict[str, _Child] = {}
        self._lock = threading.Lock()
        self._listener_ids = itertools.count()

    async def start(self, host: str = "127.0.0.1") -> list[str]:
        """Start every process (in parallel); their local base URLs, in order."""
        self._children = [_Child(self.config, host) for _ in range(self.processes)]
        try:
            await asyncio.gather(*(asyncio.to_thread(c.ready) for c in self._children))
        except BaseException:
            await self.stop()
            raise
        log.info("adapter pool: %d processes on %s", self.processes, self.urls())
        return self.urls()

    async def stop(self) -> None:
        children, self._children = self._children, []
        await asyncio.gather(*(asyncio.to_thread(c.stop) for c in children))
        self._owner.clear()

    def urls(self) -> list[str]:
        return [c.url for c in self._children]

    def ports(self) -> list[int]:
        return [c.port for c in self._children]

    def pids(self) -> list[int]:
        return [c.process.pid for c in self._children if c.process.pid is not None]

    def _assign(self, sid: str) -> _Child:
        """The session's process: its current one, else the one with the fewest sessions."""
        with self._lock:
            child = self._owner.get(sid)
            if child is None:
                live = [c for c in self._children if c.alive]  # a dead process takes none
                if not live:
                    raise InfraFailure("no adapter process is left", stage="adapter")
                child = min(live, key=lambda c: c.sessions)
                child.sessions += 1
                self._owner[sid] = child
            return child

    def _release(self, sid: str) -> _Child | None:
        with self._lock:
            child = self._owner.pop(sid, None)
            if child is not None:
                child.sessions -= 1
            return child

    def port_for(self, sid: str) -> int:
        """The port of the process serving ``sid`` (opened with ``sessions.open``)."""
        child = self._owner.get(sid)
        if child is None:
            raise KeyError(f"adapter session {sid!r} is not open in the pool")
        return child.port

    def url_for(self, sid: str) -> str:
        return self._children[0].url.rsplit(":", 1)[0] + f":{self.port_for(sid)}"

    async def open(self, sid: str, **kwargs: Any) -> str:
        """Open ``sid`` (see ``SessionStore.open``); the local URL of its process."""
        await asyncio.to_thread(self.sessions.open, sid, **kwargs)
        return self.url_for(sid)

    async def turns(self, sid: str) -> list[Turn]:
        await self.sessions.settled(sid)
        return await asyncio.to_thread(self.sessions.turns, sid)

    async def serve_socket(self, sock: socket.socket, session: str | None = None) -> Any:
        """Serve ``session``'s process on ``sock`` (a listener inside its sandbox); returns an
        async callable that stops it. The descriptor goes to the process; ours is closed."""
        if session is None:
            raise ValueError("a pool serves a sandbox's socket for one session only")
        child = self._owner.get(session)
        if child is None:
            raise KeyError(f"adapter session {session!r} is not open in the pool")
        key = next(self._listener_ids)
        try:
            future = child.submit("serve_socket", session, key, fd=sock.fileno())
            await asyncio.wrap_future(future)
        finally:
            sock.close()

        async def stop() -> None:
            try:
                await asyncio.wrap_future(child.submit("stop_listener", key))
            except RuntimeError:  # the process is gone, and its listeners with it
                pass

        return stop


def sessions_per_process(pool: AdapterPool) -> collections.Counter[int]:
    """Open sessions per process port (for logs and tests)."""
    return collections.Counter(c.port for c in pool._owner.values())

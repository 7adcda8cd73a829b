"""Extra adapter listeners, one per isolated sandbox, each with a cap on open connections.

A listener inside a sandbox (see :mod:`coding_agent_rl.sandbox.netns`) is that sandbox's only
way out. Every connection costs the adapter's process a file descriptor, and an agent can open
thousands (its own limits are per process); unbounded, one sandbox could exhaust the adapter's
descriptors and starve every other rollout. :class:`CappedSockSite` closes connections beyond
``max_connections`` at once, before aiohttp sees them.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp import web

DEFAULT_MAX_CONNECTIONS = 32  # an agent CLI keeps a handful of keep-alive connections


class _Counted(asyncio.Protocol):
    """Forwards to aiohttp's protocol; counts the connection against its site's cap."""

    def __init__(self, site: CappedSockSite, inner: Any):
        self.site = site
        self.inner = inner
        self.admitted = False

    def connection_made(self, transport: Any) -> None:
        if self.site.active >= self.site.max_connections:
            self.site.refused += 1
            transport.abort()
            return
        self.admitted = True
        self.site.active += 1
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.admitted = False
            self.site.active -= 1
            self.inner.connection_lost(exc)


class CappedSockSite(web.SockSite):
    """A :class:`aiohttp.web.SockSite` that keeps at most ``max_connections`` open."""

    __slots__ = ("active", "max_connections", "refused")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ):
        super().__init__(runner, sock)
        self.max_connections = max_connections
        self.active = 0
        self.refused = 0

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Counted(self, server()), sock=self._sock, backlog=self._backlog
        )

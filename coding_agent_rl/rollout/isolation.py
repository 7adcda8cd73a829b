"""How a rollout's agent sandbox reaches the adapter, and nothing else.

Agent network modes (``--agent-network``, ``$CODING_AGENT_RL_AGENT_NETWORK`` under slime;
default ``adapter-only``):

- ``adapter-only``: from the agent sandbox only the adapter answers. On backends whose sandboxes
  run on this host (Docker with a local engine, local bubblewrap) the sandbox has no network at
  all but its loopback, and the adapter serves a socket inside it at ``127.0.0.1:PORT``, tied to
  the rollout's session (:meth:`AgentNetwork.attach`): every host port, every other host and the
  internet are unreachable (connections fail at once, names do not resolve). On E2B the SDK's
  egress filter allows only the adapter's public address (see the e2b backend for its limits).
- ``open``: the backend's default network (Docker's bridge: the host, its networks and the
  internet are reachable); the adapter listens on the bridge's gateway.
- ``none``: no network at all, not even the adapter (a CLI that needs a model cannot run).

Grading sandboxes never have a network, whatever the mode (where a backend cannot turn it off,
the rollout record says so).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.sandbox import BACKENDS, Sandbox
from coding_agent_rl.sandbox.base import NETWORK_MODES, NetworkNeedsAddress

DEFAULT_AGENT_NETWORK = "adapter-only"


def agent_network_mode(value: str | None = None) -> str:
    """``value``, else ``settings.agent_network``, else ``adapter-only``; checked."""
    mode = value or settings.current().agent_network or DEFAULT_AGENT_NETWORK
    if mode not in NETWORK_MODES:
        raise ValueError(f"agent network {mode!r}: expected one of {', '.join(NETWORK_MODES)}")
    return mode


@dataclasses.dataclass
class AgentNetwork:
    """The agent-network ``mode`` realised on ``backend``; raises :class:`NetworkUnsupported`
    (a ``ValueError`` naming why) when the backend cannot enforce it here."""

    mode: str
    backend: str

    def __post_init__(self) -> None:
        self.mode = agent_network_mode(self.mode)
        self._cls = BACKENDS.load(self.backend)
        self.options()  # fails early, before anything starts

    @property
    def inside(self) -> bool:
        """The adapter is served inside each agent sandbox (no host address is reachable)."""
        return self.mode == "adapter-only" and self._cls.listens_inside()

    def options(self) -> dict[str, Any]:
        """The agent sandbox's network options."""
        try:
            return self._cls.network_options(self.mode, None)
        except NetworkNeedsAddress:
            pass
        return self._cls.network_options(self.mode, self._cls.public_host())

    @property
    def docker_network(self) -> str:
        return str(self.options().get("network") or "bridge")

    def bind_host(self) -> str:
        """Where the adapter's host listener goes (with ``inside``, loopback: no sandbox uses
        it, it is there for health checks and tests)."""
        if self.inside:
            return settings.current().adapter_bind_host or "127.0.0.1"
        return self._cls.adapter_bind_host(self._bridge())

    def public_url(self, port: int) -> str:
        """The adapter's URL as the agent sandbox sees it."""
        if self.inside:
            return f"http://127.0.0.1:{port}"
        return self._cls.host_url(port, self._bridge())

    def _bridge(self) -> str:
        """The network option of the agent sandboxes, for backends whose host address depends
        on it (Docker: the network's gateway); ``none`` falls back to the default bridge."""
        net = self.options().get("network")
        return str(net) if isinstance(net, str) and net != "none" else "bridge"

    async def attach(
        self, sb: Sandbox, adapter: Any, adapter_url: str, session: str
    ) -> Callable[[], Awaitable[None]] | None:
        """With ``inside``: serve the adapter on a socket inside ``sb`` that only ``session``
        may use; returns what stops it. Otherwise nothing to do (None)."""
        if not self.inside:
            return None
        port = urllib.parse.urlsplit(adapter_url).port or 80
        sock = await sb.listen(port)
        return await adapter.serve_socket(sock, session)

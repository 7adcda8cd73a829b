"""The adapter address as a real Docker sandbox sees it: bound on the bridge gateway only."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from coding_agent_rl.harness.network import AdapterUnreachable, check_reachable
from coding_agent_rl.sandbox.docker import DockerSandbox, gateway_ip

pytestmark = pytest.mark.docker


@pytest.fixture
async def listener():
    """A TCP server bound where the adapter would bind for Docker sandboxes."""
    server = await asyncio.start_server(
        lambda r, w: w.close(), DockerSandbox.adapter_bind_host(), 0
    )
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def test_gateway_binding_is_reachable_from_the_sandbox_and_nowhere_wider(sandbox, listener):
    assert DockerSandbox.adapter_bind_host() == gateway_ip() != "0.0.0.0"
    url = DockerSandbox.host_url(listener)
    assert url == f"http://{gateway_ip()}:{listener}"
    await check_reachable(sandbox, url)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", listener), timeout=2).close()


async def test_a_closed_port_is_reported_at_once(sandbox, listener):
    timeout = 40.0
    t0 = time.monotonic()
    with pytest.raises(AdapterUnreachable, match="ADAPTER_PUBLIC_HOST"):
        await check_reachable(sandbox, f"http://{gateway_ip()}:1", timeout=timeout)
    elapsed = time.monotonic() - t0
    assert elapsed < timeout / 4, elapsed  # refused, never waited out


async def test_a_sandbox_without_network_cannot_reach_it(offline_sandbox, listener):
    with pytest.raises(AdapterUnreachable):
        await check_reachable(offline_sandbox, DockerSandbox.host_url(listener), timeout=3)

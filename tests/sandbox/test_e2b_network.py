"""E2B network and environment against the SDK stand-in, which enforces what E2B enforces: the
internet switch, the egress filter (only its addresses answer, in the sandbox's own network
namespace) and the DNS servers E2B opens; commands see only the environment passed in."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from support import BASE_IMAGE

from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.sandbox import Sandbox, create_sandbox


def _dial(host: str, port: int) -> str:
    """A bash line that connects to host:port and prints bash's verdict."""
    return f"timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port} && echo connected' 2>&1; true"


async def _reach(sb: Sandbox, host: str, port: int) -> str:
    out = (await sb.exec(_dial(host, port), timeout=15)).stdout
    if "connected" in out:
        return "connected"
    if "refused" in out:
        return "answers"  # routed: the address is there (nothing listens on that port)
    assert "unreachable" in out, out
    return "unreachable"


@pytest.fixture
def host_listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


async def test_commands_get_only_the_environment_passed_in_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2B_HOST_SECRET", "leaked")
    async with create_sandbox("e2b", BASE_IMAGE, env={"FROM_OPTION": "1"}) as sb:
        out = await sb.exec(
            'echo "${E2B_HOST_SECRET-unset} $FROM_OPTION $FROM_EXEC $HOME"', env={"FROM_EXEC": "2"}
        )
        assert out.stdout == "unset 1 2 /root\n"


async def test_internet_switch_and_egress_filter_are_enforced_against_sdk_stand_in(
    use_e2b_stand_in: Any, host_listener: int
) -> None:
    async with create_sandbox("e2b", BASE_IMAGE) as sb:  # E2B's default: everything
        assert await _reach(sb, "127.0.0.1", host_listener) == "connected"
    async with create_sandbox("e2b", BASE_IMAGE, network="none") as sb:
        assert await _reach(sb, "127.0.0.1", host_listener) == "answers"  # its own loopback
        assert await _reach(sb, "203.0.113.5", 80) == "unreachable"
    async with create_sandbox(
        "e2b", BASE_IMAGE, network="adapter-only", allow_out=["203.0.113.5"]
    ) as sb:
        assert await _reach(sb, "203.0.113.5", 80) == "answers"
        assert await _reach(sb, "203.0.113.5", 9) == "answers"  # by address, not port
        assert await _reach(sb, "198.51.100.7", 80) == "unreachable"
        assert await _reach(sb, "8.8.8.8", 53) == "unreachable"  # no resolver
        assert await _reach(sb, "127.0.0.1", host_listener) != "connected"


@pytest.mark.parametrize("defence", ["off", "on"])
async def test_an_adapter_given_by_name_opens_no_public_resolver_against_sdk_stand_in(
    use_e2b_stand_in: Any, monkeypatch: pytest.MonkeyPatch, defence: str
) -> None:
    """ADAPTER_PUBLIC_HOST is a name. Kept as a name (what the backend did before, now only
    on request) E2B opens its resolver 8.8.8.8 to the sandbox: a way out to the internet
    (DNS tunnelling) past an ``adapter-only`` filter. By default the name is resolved here and
    the sandbox dials the IP, with no DNS server reachable."""
    monkeypatch.setenv("ADAPTER_PUBLIC_HOST", "localhost")
    if defence == "off":
        monkeypatch.setenv("CODING_AGENT_RL_E2B_ADAPTER_DNS", "1")
    net = AgentNetwork("adapter-only", "e2b")
    async with create_sandbox("e2b", BASE_IMAGE, **net.options()) as sb:
        (created,) = use_e2b_stand_in.created
        if defence == "off":
            assert net.options()["allow_out"] == ["localhost"]
            assert net.public_url(18001) == "http://localhost:18001"
            assert "8.8.8.8" in sb._sbx.egress
            assert await _reach(sb, "8.8.8.8", 53) == "answers"  # the harm: a resolver
            return
        assert net.options() == {"network": "adapter-only", "allow_out": ["127.0.0.1"]}
        assert net.public_url(18001) == "http://127.0.0.1:18001"
        assert created["network"]["dns_servers"] == [] and sb._sbx.egress == ["127.0.0.1"]
        assert await _reach(sb, "8.8.8.8", 53) == "unreachable"
        assert await _reach(sb, "1.1.1.1", 53) == "unreachable"

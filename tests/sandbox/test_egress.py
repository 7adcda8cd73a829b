"""Adapter-only egress, attacked from inside real sandboxes (Docker and bubblewrap).

The test opens listeners on every IPv4 address of this host (loopback, the uplink, the Docker
bridge) and serves a real adapter into the sandbox the way rollouts do
(:class:`AgentNetwork.attach`). From the sandbox: the adapter answers; every host listener,
other sandboxes, outside names and outside addresses do not. The same probes with the ``open``
network (the defence off) reach host listeners: the attack is real. Traffic goes only to this
machine: the outside is probed by name resolution and by a connect to a TEST-NET-2 address,
which must fail before any packet leaves (no route).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
import uuid

import pytest
from support import BASE_IMAGE

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.sandbox import create_sandbox
from coding_agent_rl.sandbox.netns import host_ipv4_addresses

BASE = BASE_IMAGE
OUTSIDE = "198.51.100.7"  # TEST-NET-2: reserved, never routed (192.0.2.0/24 is this VM's uplink)
BACKEND_PARAMS = [pytest.param("docker", marks=pytest.mark.docker), "local"]


def sandbox_args(backend: str) -> tuple[str, dict]:
    if backend == "docker":
        return BASE, {"run_id": f"test-egress-{uuid.uuid4().hex[:8]}"}
    from coding_agent_rl.sandbox.local import bwrap_reason

    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")
    return "host", {}


class Listeners:
    """One TCP listener per host address; counts the connections each accepted."""

    def __init__(self) -> None:
        self.servers: dict[str, asyncio.base_events.Server] = {}
        self.accepted: dict[str, int] = {}

    async def start(self) -> Listeners:
        for addr in host_ipv4_addresses():
            self.accepted[addr] = 0

            def on_conn(r, w, addr=addr):
                self.accepted[addr] += 1
                w.write(b"HOST-LISTENER\n")
                w.close()

            self.servers[addr] = await asyncio.start_server(on_conn, addr, 0)
        return self

    def targets(self) -> list[tuple[str, int]]:
        return [(a, s.sockets[0].getsockname()[1]) for a, s in self.servers.items()]

    def close(self) -> None:
        for s in self.servers.values():
            s.close()


@pytest.fixture
async def listeners():
    lst = await Listeners().start()
    yield lst
    lst.close()


@pytest.fixture
async def adapter(renderer):
    server = AdapterServer(AdapterConfig(sglang_url="http://127.0.0.1:9", renderer=renderer))
    url = await server.start("127.0.0.1", 0)
    yield server, int(url.rsplit(":", 1)[1])
    await server.stop()


PROBE = r"""
connect() {  # host port -> "ok <ms>" or "fail <ms> <why>"
  t0=$(date +%s%N)
  if out=$(timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2 && { timeout 1 head -c 14 <&3 || true; }" 2>&1); then
    echo "ok $(( ($(date +%s%N) - t0) / 1000000 )) $out"
  else
    echo "fail $(( ($(date +%s%N) - t0) / 1000000 )) $out" | tr '\n' ' '; echo
  fi
}
http() {  # port key path -> the status line
  exec 3<>/dev/tcp/127.0.0.1/$1 || { echo "no adapter"; return; }
  printf 'GET %s HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' "$3" "$2" >&3
  head -n1 <&3 | tr -d '\r'
}
"""


async def probe(sb, script: str, user: str = "nobody") -> list[str]:
    res = await sb.exec(PROBE + script, user=user, timeout=120)
    return res.stdout.splitlines()


async def attached(backend: str, mode: str, adapter, sid: str):
    """A sandbox with the agent network ``mode``, the adapter attached for ``sid``."""
    server, port = adapter
    image, opts = sandbox_args(backend)
    net = AgentNetwork(mode, backend)
    sb = create_sandbox(backend, image, **{**opts, **net.options()})
    await sb.__aenter__()
    stop = await net.attach(sb, server, net.public_url(port), sid)
    return sb, stop, net


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_adapter_only_reaches_the_adapter_and_nothing_else(backend, adapter, listeners):
    server, port = adapter
    sid = f"egress-{uuid.uuid4().hex}"
    server.sessions.open(sid)
    sb, stop, net = await attached(backend, "adapter-only", adapter, sid)
    try:
        assert net.inside and stop is not None
        script = f"http {port} {sid} /v1/models; http {port} nokey /v1/models\n"
        for addr, p in listeners.targets():
            script += f"connect {addr} {p}\n"
        script += f"connect {OUTSIDE} 80\n"
        script += "t0=$(date +%s%N); getent hosts example.com; echo getent=$? $(( ($(date +%s%N) - t0) / 1000000 ))\n"
        # interfaces of the sandbox's network namespace (/sys may show the host's)
        script += "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo\n"
        script += "grep -vc ' lo$' /proc/net/if_inet6\n"  # IPv6 addresses beyond loopback
        out = await probe(sb, script)
    finally:
        await stop()
        await sb.close()
    assert out[0] == "HTTP/1.1 200 OK" and out[1] == "HTTP/1.1 401 Unauthorized", out
    targets = listeners.targets()
    for (addr, _), line in zip(targets, out[2:], strict=False):
        verdict, ms = line.split()[:2]
        assert verdict == "fail" and int(ms) < 2000, (addr, line)
    assert sum(listeners.accepted.values()) == 0, listeners.accepted
    outside = out[2 + len(targets)]
    assert (
        outside.startswith("fail") and "unreachable" in outside and int(outside.split()[1]) < 1000
    )
    getent, ms = out[3 + len(targets)].removeprefix("getent=").split()
    assert getent != "0" and int(ms) < 2000, out
    assert out[4 + len(targets)].split() == ["lo"] and out[5 + len(targets)].strip() == "0"


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_open_network_reaches_host_listeners(backend, adapter, listeners):
    """The defence off: with the backend's open network the same probe reaches the host."""
    sb, stop, net = await attached(backend, "open", adapter, "unused")
    try:
        assert not net.inside and stop is None
        out = await probe(sb, "".join(f"connect {a} {p}\n" for a, p in listeners.targets()))
    finally:
        await sb.close()
    reached = [
        a for (a, _), line in zip(listeners.targets(), out, strict=True) if "HOST-LISTENER" in line
    ]
    assert reached, out
    assert all(listeners.accepted[a] >= 1 for a in reached)


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["adapter-only", "open"])
async def test_sandboxes_cannot_reach_each_other(mode, adapter):
    """Rollouts of one group must not talk (share a solution): B listens, A dials B's addresses."""
    a, stop_a, _ = await attached("docker", mode, adapter, "a")
    b, stop_b, _ = await attached("docker", mode, adapter, "b")
    try:
        await b.exec("nohup python3 -m http.server 8123 --bind 0.0.0.0 >/dev/null 2>&1 &")
        await b.exec(
            "for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/8123) 2>/dev/null && exit; sleep 0.1; done"
        )
        addrs = (await b.exec("hostname -I")).stdout.split() or ["127.0.0.1"]
        out = await probe(a, "".join(f"connect {x} 8123\n" for x in addrs))
    finally:
        for sb, stop in ((a, stop_a), (b, stop_b)):
            if stop is not None:
                await stop()
            await sb.close()
    if mode == "adapter-only":
        assert all(line.startswith("fail") for line in out), out
    else:  # the defence off: A reaches B on the shared bridge
        assert any(line.startswith("ok") for line in out), out


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_a_listener_serves_only_its_own_session(backend, adapter, monkeypatch):
    """A stolen key is useless from another sandbox: each listener is tied to its session."""
    server, port = adapter
    mine, other = f"mine-{uuid.uuid4().hex}", f"other-{uuid.uuid4().hex}"
    server.sessions.open(mine)
    server.sessions.open(other)
    sb, stop, _ = await attached(backend, "adapter-only", adapter, mine)
    try:
        out = await probe(sb, f"http {port} {mine} /v1/models; http {port} {other} /v1/models\n")
        assert out == ["HTTP/1.1 200 OK", "HTTP/1.1 401 Unauthorized"], out
        # Defence off: a listener bound to no session accepts any live key.
        await stop()
        sock = await sb.listen(port)
        stop = await server.serve_socket(sock, None)
        out = await probe(sb, f"http {port} {other} /v1/models\n")
        assert out == ["HTTP/1.1 200 OK"], out
    finally:
        await stop()
        await sb.close()


HOLD = r"""
import socket, sys, time
port, n, expect, hold = (int(a) for a in sys.argv[1:5])

def count():
    held = refused = 0
    for s in conns:
        try:
            data = s.recv(1, socket.MSG_DONTWAIT)
            refused += data == b""
        except BlockingIOError:
            held += 1  # open, idle: the adapter waits for a request
        except OSError:
            refused += 1
    return held, refused

conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
deadline = time.monotonic() + 60
held, refused = count()
while refused < expect and time.monotonic() < deadline:  # until the refusals have arrived
    time.sleep(0.05)
    held, refused = count()
open("/tmp/held.txt", "w").write(f"{held} {refused}")  # the connections are held from here on
time.sleep(hold)
print(held, refused, flush=True)
"""


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_connections_per_listener_are_capped(backend, adapter, monkeypatch):
    """An agent opening hundreds of idle connections cannot exhaust the adapter's descriptors:
    its listener keeps at most the cap open; other sessions are served meanwhile."""
    server, port = adapter
    cap = server.config.listener_max_connections
    sid = f"hog-{uuid.uuid4().hex}"
    server.sessions.open(sid)
    server.sessions.open("bystander")
    sb, stop, _ = await attached(backend, "adapter-only", adapter, sid)
    try:
        await sb.write_file("/tmp/hold.py", HOLD)
        # Held for up to 60 s; the bystander is served while they are (ordering, not a sleep).
        script = f"python3 /tmp/hold.py {port} 200 {200 - cap} 60"
        held = asyncio.ensure_future(sb.exec(script, user="nobody"))
        while not (await sb.exec("cat /tmp/held.txt 2>/dev/null")).stdout and not held.done():
            await asyncio.sleep(0.05)
        assert not held.done(), held.result()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": "Bearer bystander"}
        )
        with await asyncio.to_thread(urllib.request.urlopen, req, timeout=30) as r:
            assert r.status == 200
        assert not held.done()  # served while the hog's connections were held
        held.cancel()  # (the sandbox kills what the exec started)
        with contextlib.suppress(asyncio.CancelledError):
            await held
        kept, refused = map(int, (await sb.exec("cat /tmp/held.txt")).stdout.split())
        assert kept <= cap and refused >= 200 - cap, (kept, refused)
        # Defence off: no cap, every connection is kept (and costs the adapter a descriptor).
        await stop()
        monkeypatch.setattr(server.config, "listener_max_connections", 10_000)
        stop = await server.serve_socket(await sb.listen(port), sid)
        kept, refused = map(
            int,
            (await sb.exec(f"python3 /tmp/hold.py {port} 200 0 1", user="nobody")).stdout.split(),
        )
        assert (kept, refused) == (200, 0)
    finally:
        await stop()
        await sb.close()


@pytest.mark.docker
async def test_64_concurrent_adapter_only_sandboxes(adapter):
    """The mechanism at the scale of a rollout node: 64 sandboxes at once, each with its own
    listener, each reaching its adapter session and nothing else; nothing left afterwards."""
    from coding_agent_rl.sandbox import docker_engine as engine
    from coding_agent_rl.sandbox.disk import disk_dir

    server, port = adapter
    run_id = f"test-egress64-{uuid.uuid4().hex[:8]}"
    net = AgentNetwork("adapter-only", "docker")

    async def one(i: int) -> list[str]:
        sid = f"s{i}-{uuid.uuid4().hex}"
        server.sessions.open(sid)
        async with create_sandbox("docker", BASE, run_id=run_id, **net.options()) as sb:
            stop = await net.attach(sb, server, net.public_url(port), sid)
            try:
                return await probe(sb, f"http {port} {sid} /v1/models; connect 172.17.0.1 22\n")
            finally:
                await stop()

    t0 = time.monotonic()
    outs = await asyncio.gather(*(one(i) for i in range(64)))
    took = time.monotonic() - t0
    assert all(o[0] == "HTTP/1.1 200 OK" and o[1].startswith("fail") for o in outs), [
        o for o in outs if o[0] != "HTTP/1.1 200 OK"
    ][:3]
    assert engine.list_containers(run_id) == []
    assert not (disk_dir() / run_id).exists()
    print(json.dumps({"sandboxes": 64, "seconds": round(took, 1)}))

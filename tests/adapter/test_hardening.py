"""The adapter against hostile clients, over real HTTP (aiohttp server, raw sockets as clients).

Each attack is also run with its defence switched off (monkeypatched away) where that can be
done, and must then get further: that shows the test sees the attack and the defence stops it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import urllib.parse

import pytest
from support.adapter_clients import BASH, post, recorded

from coding_agent_rl.adapter import handler as handler_mod
from coding_agent_rl.adapter.handler import body_limit, image_allowance
from coding_agent_rl.adapter.sessions import KEY_BITS, new_session_id
from coding_agent_rl.multimodal.parts import ImageSettings
from coding_agent_rl.multimodal.pictures import ImageLimits

ANTHROPIC = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
FIFTY_MIB = 50 << 20


async def raw_request(url: str, head: str, body: bytes = b"", wait: float = 10.0) -> bytes:
    """Send ``head`` (+ ``body``) on a fresh connection; what came back within ``wait`` s (b"" if
    nothing did). The wait only bounds a hang: a reply returns at once."""
    parts = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(65536), wait)
        except asyncio.TimeoutError:
            return b""
    finally:
        writer.close()


async def replies_before_and_after_the_body(url: str, head: str, size: int) -> tuple[bytes, bytes]:
    """Send ``head``; what came back within 2 s; then send the ``size``-byte body it announced;
    what came back after it. A server that waits for the body before refusing answers only
    after it: it read the whole body first."""
    parts = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(head.encode())
        await writer.drain()
        try:
            before = await asyncio.wait_for(reader.read(65536), 2.0)
        except asyncio.TimeoutError:
            before = b""
        after = b""
        if not before:
            chunk = b"x" * (1 << 20)
            for _ in range(size >> 20):
                writer.write(chunk)
                await writer.drain()
            after = await asyncio.wait_for(reader.read(65536), 60)
        return before, after
    finally:
        writer.close()
        await writer.wait_closed()


def big_head(path: str, key: str | None, length: int = FIFTY_MIB) -> str:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: adapter\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )


async def test_no_body_is_read_before_the_session_is_authenticated(scripted_stack, monkeypatch):
    """Headers announce 50 MiB and no body follows: a refusal must come without waiting for it."""
    adapter, _, url = await scripted_stack({"steps": []})
    for key in (None, "not-a-session"):
        reply = await raw_request(url, big_head("/v1/messages", key))
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]

    # Defence off (the body read first): the same request gets no answer while the body is due.
    async def read_first(self, request):
        body = await handler_mod.read_json(request, self.max_body)
        session = handler_mod.authenticate(request, self.sessions, self.bound, admit=True)
        return session, body

    monkeypatch.setattr(handler_mod.TurnHandler, "admit_and_read", read_first)
    adapter.handler.max_body = 64 << 20  # the limit before it followed the context
    before, after = await replies_before_and_after_the_body(
        url, big_head("/v1/messages", None), FIFTY_MIB
    )
    # No answer while the body was due; the refusal came once all 50 MiB had been read.
    assert before == b"" and after.startswith(b"HTTP/1.1 4"), after[:200]


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/m:generateContent",
        "/v1beta/models/m:streamGenerateContent?alt=sse",
        "/v1beta/models/m:countTokens",
    ],
)
async def test_gemini_routes_refuse_unread_bodies(scripted_stack, path):
    """The Gemini routes too: no key / a wrong key -> 401, a body over the limit -> 413, both
    before a byte of the (announced 50 MiB, never sent) body."""
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1")
    for key in (None, "not-a-session"):
        reply = await raw_request(url, big_head(path, key))
        assert reply.startswith(b"HTTP/1.1 401") and b"UNAUTHENTICATED" in reply, reply[:300]
    reply = await raw_request(url, big_head(path, "s1", adapter.max_body + 1))
    assert reply.startswith(b"HTTP/1.1 413") and b'"code": 413' in reply, reply[:300]
    assert await recorded(adapter, "s1") == []


async def test_a_body_over_the_limit_is_refused_unread_with_413(scripted_stack, monkeypatch):
    adapter, _, url = await scripted_stack({"steps": []}, max_context=32768)
    adapter.sessions.open("s1")
    limits = adapter.config.images.limits
    allowance = image_allowance(limits.max_bytes, limits.max_per_sample)
    assert adapter.max_body == body_limit(32768, allowance) == (4 << 20) + allowance
    over = adapter.max_body + (1 << 20)
    # Only the head is sent: a reply at all means the body was refused unread.
    reply = await raw_request(url, big_head("/v1/messages", "s1", over))
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"request_too_large" in reply
    # Streamed (no Content-Length): cut off at the limit while it arrives.
    status, _, text = await post(
        f"{url}/v1/messages",
        None,
        raw=json.dumps({**ANTHROPIC, "pad": "x" * over}).encode(),
    )
    assert status == 413 and "request_too_large" in text
    assert await recorded(adapter, "s1") == []
    # The session is unharmed: its next request is served.
    assert (await post(f"{url}/v1/messages", ANTHROPIC))[0] == 200

    # Defence off (a limit above the announced size): the server waits for the body instead.
    adapter.handler.max_body = over + (64 << 20)
    before, after = await replies_before_and_after_the_body(
        url, big_head("/v1/messages", "s1", over), over
    )
    assert before == b"" and after.startswith(b"HTTP/1.1 4"), after[:200]  # read it all


@pytest.mark.parametrize(
    ("context", "limit"), [(None, 8 << 20), (8192, 4 << 20), (262144, 16 << 20)]
)
def test_body_limit_follows_the_context_length(context, limit):
    assert body_limit(context) == limit


async def test_keys_are_128_random_bits_and_near_misses_fail(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": []})
    prefix = "run-task-0-0-"
    keys = {new_session_id(prefix) for _ in range(100)}
    assert len(keys) == 100
    for key in keys:
        tail = key.removeprefix(prefix)
        assert len(tail) * 4 == KEY_BITS and int(tail, 16) >= 0
    key = next(iter(keys))
    adapter.sessions.open(key)
    near = [key[:-1], key + "0", key[:-1] + ("0" if key[-1] != "0" else "1"), key.upper(), ""]
    for guess in near:
        assert (await post(f"{url}/v1/messages", ANTHROPIC, sid=guess or None))[0] == 401, guess
    assert (await post(f"{url}/v1/messages", ANTHROPIC, sid=key))[0] == 200


async def test_request_rate_is_capped_per_session_with_a_retry_hint(scripted_stack):
    """A bucket of 3 that refills by one request every 1000 s: no wall-clock race on a loaded
    machine. The refill is shown by moving the bucket's clock back, not by waiting."""
    from coding_agent_rl.adapter.sessions import SessionConfig

    rate = 0.001
    adapter, _, url = await scripted_stack(
        {"steps": []}, session_defaults=SessionConfig(rate=rate, burst=3)
    )
    adapter.sessions.open("fast")
    adapter.sessions.open("calm")
    fast = adapter.sessions.authenticate("fast")
    statuses = [(await post(f"{url}/v1/messages", ANTHROPIC, sid="fast"))[0] for _ in range(6)]
    assert statuses == [200, 200, 200, 429, 429, 429]
    reply = await raw_request(
        url,
        big_head("/v1/messages", "fast", len(json.dumps(ANTHROPIC))),
        json.dumps(ANTHROPIC).encode(),
    )
    assert reply.startswith(b"HTTP/1.1 429") and b"retry-after:" in reply.lower()
    assert b"x-should-retry: true" in reply.lower()
    # Another session is not affected; the fast one recovers once a token's time has passed.
    assert (await post(f"{url}/v1/messages", ANTHROPIC, sid="calm"))[0] == 200
    fast.refilled -= 1 / rate
    assert (await post(f"{url}/v1/messages", ANTHROPIC, sid="fast"))[0] == 200
    assert (await post(f"{url}/v1/messages", ANTHROPIC, sid="fast"))[0] == 429

    # Defence off (no rate): the same burst is served whole.
    adapter.sessions.open("free")
    free = adapter.sessions.authenticate("free")
    free.config = dataclasses.replace(free.config, rate=None)
    statuses = [(await post(f"{url}/v1/messages", ANTHROPIC, sid="free"))[0] for _ in range(6)]
    assert statuses == [200] * 6


async def test_requests_in_flight_are_capped_per_session(scripted_stack, monkeypatch):
    from coding_agent_rl.adapter.sessions import SessionConfig

    adapter, _, url = await scripted_stack(
        {"steps": []}, session_defaults=SessionConfig(max_in_flight=2, rate=None)
    )
    adapter.sessions.open("s1")
    release = asyncio.Event()
    real_generate = adapter.engine.generate

    async def slow_generate(prepared, sid):
        await release.wait()
        return await real_generate(prepared, sid)

    monkeypatch.setattr(adapter.engine, "generate", slow_generate)
    first = [asyncio.create_task(post(f"{url}/v1/messages", ANTHROPIC)) for _ in range(2)]
    while adapter.sessions.in_flight("s1") < 2:
        await asyncio.sleep(0.01)
    status, _, text = await post(f"{url}/v1/messages", ANTHROPIC)
    assert status == 429 and "in flight" in text
    # Defence off (no cap): a third request is taken in while two are in flight.
    free = adapter.sessions.authenticate("s1")
    free.config = dataclasses.replace(free.config, max_in_flight=None)
    third = asyncio.create_task(post(f"{url}/v1/messages", ANTHROPIC))
    while adapter.sessions.in_flight("s1") < 3 and not third.done():
        await asyncio.sleep(0.01)
    assert adapter.sessions.in_flight("s1") == 3
    release.set()
    assert [(await t)[0] for t in (*first, third)] == [200, 200, 200]


async def test_one_sessions_garbage_does_not_disturb_another(scripted_stack):
    """Session A floods the adapter with malformed JSON, wrong fields, oversized and truncated
    bodies, while session B holds a multi-turn conversation: B's turns all succeed, in time."""
    script = {"steps": [{"shell": "ls"}, {"shell": "pwd"}, {"say": "done"}]}
    # A small image allowance, so that the 12 MiB padded body is over the limit (the default
    # leaves room for 8 images of 5 MiB: see test_a_body_over_the_limit_is_refused_unread_with_413).
    images = ImageSettings(limits=ImageLimits(max_bytes=64 << 10, max_per_sample=1))
    adapter, _, url = await scripted_stack(script, max_context=32768, images=images)
    adapter.sessions.open("attacker")
    adapter.sessions.open("victim")
    adapter.sessions.open("baseline")
    garbage = [
        b'{"model": "m", "messages": [',
        b"[1, 2, 3]",
        json.dumps({"model": "m", "max_tokens": "lots", "messages": "hi"}).encode(),
        json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "nobody"}]}).encode(),
        json.dumps({**ANTHROPIC, "pad": "\\u0000" * (2 << 20)}).encode(),
        b"\xff\xfe not json at all",
    ]
    stop = asyncio.Event()
    statuses: list[int] = []

    async def attack() -> None:
        while not stop.is_set():
            for raw in garbage:
                statuses.append(
                    (await post(f"{url}/v1/messages", None, raw=raw, sid="attacker"))[0]
                )
            await raw_request(url, big_head("/v1/messages", "attacker"), wait=0.05)

    async def conversation(sid: str) -> list[float]:
        messages = [{"role": "user", "content": "look around"}]
        latencies = []
        for _ in range(3):
            t0 = time.monotonic()
            status, _, text = await post(
                f"{url}/v1/messages",
                {"model": "m", "max_tokens": 64, "tools": [BASH], "messages": messages},
                sid=sid,
            )
            latencies.append(time.monotonic() - t0)
            assert status == 200, text
            content = json.loads(text)["content"]
            messages.append({"role": "assistant", "content": content})
            for block in content:
                if block["type"] == "tool_use":
                    messages.append(
                        {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": block["id"], "content": "ok"}
                            ],
                        }
                    )
        return latencies

    baseline = await conversation("baseline")  # the same turns, no attack: this machine's pace
    attackers = [asyncio.create_task(attack()) for _ in range(3)]
    try:
        await asyncio.sleep(0.2)
        latencies = await conversation("victim")
    finally:
        stop.set()
        await asyncio.gather(*attackers)
    assert len(await recorded(adapter, "victim")) == 3
    assert await recorded(adapter, "attacker") == []
    assert statuses and all(400 <= s < 500 for s in statuses), sorted(set(statuses))
    # In time: within a few times the unattacked pace (the attackers share the event loop and
    # the CPU, so some slow-down is fair; starving the victim is not).
    assert max(latencies) < max(5.0, 10 * max(baseline)), (latencies, baseline)

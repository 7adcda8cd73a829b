"""The adapter <-> SGLang boundary, against an SGLang stand-in (no GPU SGLang can run here):
request shape, context budget, client disconnects (abort + 499, turn not recorded), retries."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest
from support.adapter_clients import BASH, anthropic_reply, parse_sse, post, recorded
from support.sglang_stand_in import SGLangStandIn

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
from coding_agent_rl.model.errors import UpstreamError
from coding_agent_rl.model.sglang import SGLangClient

BODY = {
    "model": "m",
    "max_tokens": 300,
    "tools": [BASH],
    "messages": [{"role": "user", "content": "hello there"}],
}


@pytest.fixture
async def stand_in_stack(renderer):
    started: list = []

    async def start(stand_in: SGLangStandIn, **config):
        sglang_url = await stand_in.start()
        adapter = AdapterServer(AdapterConfig(sglang_url=sglang_url, renderer=renderer, **config))
        url = await adapter.start()
        started.extend([stand_in, adapter])
        adapter.sessions.open("s1")
        return adapter, url

    yield start
    for server in reversed(started):
        await server.stop()


def ids_of(renderer, text: str) -> list[int]:
    end = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    return [*renderer.tokenizer.encode(text, add_special_tokens=False), end]


async def test_generate_request_shape_with_sglang_stand_in(stand_in_stack, renderer):
    stand_in = SGLangStandIn(ids_of(renderer, "Hi!"))
    adapter, url = await stand_in_stack(
        stand_in, sampling_defaults={"temperature": 1.0, "top_k": 20}
    )
    body = {**BODY, "temperature": 0.6, "top_p": 0.9, "stop_sequences": ["STOP"]}
    for _ in range(2):
        status, _, text = await post(f"{url}/v1/messages", body)
        assert status == 200
    reply = json.loads(text)
    assert reply["content"] == [{"type": "text", "text": "Hi!"}]
    assert reply["usage"]["cache_read_input_tokens"] == 3
    first, second = stand_in.generate_calls
    turn = (await recorded(adapter, "s1"))[0]
    sent = first["body"]
    assert sent["input_ids"] == turn.prompt_ids and sent["return_logprob"] is True
    assert first["headers"]["X-SMG-Routing-Key"] == "s1"
    assert sent["rid"] != second["body"]["rid"] and len(sent["rid"]) >= 16
    params = sent["sampling_params"]
    assert params["max_new_tokens"] == 300
    assert (params["temperature"], params["top_p"], params["top_k"]) == (0.6, 0.9, 20)
    assert params["stop"] == ["STOP"]
    assert renderer.tokenizer.convert_tokens_to_ids("<|im_end|>") in params["stop_token_ids"]
    assert turn.output_ids == stand_in.output_ids
    assert turn.output_logprobs == [-0.25] * len(stand_in.output_ids)


async def test_session_sampling_defaults_and_fixed_values(stand_in_stack, renderer):
    stand_in = SGLangStandIn(ids_of(renderer, "ok"))
    adapter, url = await stand_in_stack(stand_in)
    adapter.sessions.open(
        "s2",
        sampling_defaults={"top_p": 0.5, "max_new_tokens": 50},
        sampling_fixed={"temperature": 1.0, "max_new_tokens": 100},
    )
    await post(f"{url}/v1/messages", {**BODY, "temperature": 0.1, "max_tokens": 64000}, sid="s2")
    await post(
        f"{url}/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        sid="s2",
    )
    a, b = (c["body"]["sampling_params"] for c in stand_in.generate_calls)
    assert (a["temperature"], a["top_p"], a["max_new_tokens"]) == (1.0, 0.5, 100)
    assert (b["temperature"], b["top_p"], b["max_new_tokens"]) == (1.0, 0.5, 50)


async def test_context_budget_caps_max_new_tokens(stand_in_stack, renderer):
    stand_in = SGLangStandIn(ids_of(renderer, "ok"))
    adapter, url = await stand_in_stack(stand_in)
    prompt_len = renderer.count(
        [{"role": "user", "content": "hello there"}],
        [
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "description": "Run a shell command.",
                    "parameters": BASH["input_schema"],
                },
            }
        ],
    )
    adapter.sessions.open("s2", max_context=prompt_len + 7)
    await post(f"{url}/v1/messages", BODY, sid="s2")
    assert stand_in.generate_calls[0]["body"]["sampling_params"]["max_new_tokens"] == 7
    assert len(stand_in.generate_calls[0]["body"]["input_ids"]) == prompt_len


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_exhausted_context_gives_empty_length_turn_without_calling_sglang(
    stand_in_stack, renderer, stream
):
    stand_in = SGLangStandIn(ids_of(renderer, "never"))
    adapter, url = await stand_in_stack(stand_in, max_context=20)
    status, _, text = await post(f"{url}/v1/messages", {**BODY, "stream": stream})
    assert status == 200
    reply = anthropic_reply(text, stream)
    assert reply["stop_reason"] == "max_tokens" and reply["content"] == []
    assert stand_in.generate_calls == []
    (turn,) = await recorded(adapter, "s1")
    assert turn.output_ids == [] and turn.finish_reason == "length"
    assert len(turn.prompt_ids) > 20


async def test_client_disconnect_mid_stream_aborts_sglang_stand_in(stand_in_stack, renderer):
    stand_in = SGLangStandIn(ids_of(renderer, "late"), hold=True)
    adapter, url = await stand_in_stack(stand_in)
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{url}/v1/messages",
            json={**BODY, "stream": True},
            headers={"Authorization": "Bearer s1"},
        )
        assert resp.status == 200
        first = await resp.content.readuntil(b"\n\n")
        assert b"message_start" in first
        await asyncio.wait_for(stand_in.started.wait(), 10)
        resp.close()  # the CLI goes away mid-generation
    for _ in range(100):
        if stand_in.aborted:
            break
        await asyncio.sleep(0.05)
    rid = stand_in.generate_calls[0]["body"]["rid"]
    assert stand_in.aborted == [rid]
    await asyncio.sleep(0.2)
    assert (await recorded(adapter, "s1")) == []  # 499: not recorded
    # The aborted request no longer counts against the turn cap.
    adapter.sessions.open("s3", max_turns=1)
    stand_in.hold = False
    assert (await post(f"{url}/v1/messages", BODY, sid="s3"))[0] == 200


async def test_client_timeout_in_json_mode_aborts_sglang_stand_in(stand_in_stack, renderer):
    stand_in = SGLangStandIn(ids_of(renderer, "late"), hold=True)
    adapter, url = await stand_in_stack(stand_in)
    with pytest.raises(asyncio.TimeoutError):
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as http:
            await http.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                headers={"Authorization": "Bearer s1"},
            )
    for _ in range(100):
        if stand_in.aborted:
            break
        await asyncio.sleep(0.05)
    assert stand_in.aborted == [stand_in.generate_calls[0]["body"]["rid"]]
    assert (await recorded(adapter, "s1")) == []


async def test_client_gone_after_generation_is_not_recorded(stand_in_stack, renderer):
    """The reply is ready but the client already left: 499, no turn (and nothing to abort)."""
    stand_in = SGLangStandIn(ids_of(renderer, "done"), delay_s=3.0)
    adapter, url = await stand_in_stack(stand_in, poll_s=30.0)  # the wait loop won't notice
    async with aiohttp.ClientSession() as http:
        request = asyncio.ensure_future(
            http.post(f"{url}/v1/messages", json=BODY, headers={"Authorization": "Bearer s1"})
        )
        while not stand_in.generate_calls and not request.done():  # it reached SGLang ...
            await asyncio.sleep(0.01)
        request.cancel()  # ... and the client leaves before the reply is ready
        with pytest.raises(asyncio.CancelledError):
            await request
    assert (await recorded(adapter, "s1")) == []  # once the handler is done with the reply
    assert len(stand_in.generate_calls) == 1 and stand_in.aborted == []


@pytest.mark.parametrize("wire", ["messages-json", "responses-stream"])
async def test_sglang_abort_finish_ends_the_session(stand_in_stack, renderer, wire):
    """A reply with ``finish_reason: abort`` that the adapter did not ask for is the trainer
    aborting its engines (slime, end of a rollout step): the CLI is told not to retry, nothing is
    recorded, and the session is refused from then on without calling SGLang again; another
    session is untouched."""
    stand_in = SGLangStandIn(ids_of(renderer, "x"), finish={"type": "abort", "message": "m"})
    adapter, url = await stand_in_stack(stand_in)
    if wire == "messages-json":
        status, _, text = await post(f"{url}/v1/messages", BODY)
        assert status == 503 and "aborted a request (m)" in json.loads(text)["error"]["message"]
    else:
        _, _, text = await post(f"{url}/v1/responses", {"model": "m", "input": "x", "stream": True})
        assert parse_sse(text)[-1][1]["type"] in ("error", "response.failed"), text[-500:]
    assert adapter.engine.aborted("s1") == "the policy server aborted a request (m)"
    assert (await recorded(adapter, "s1")) == []
    status, _, _ = await post(f"{url}/v1/messages", BODY)
    assert status == 503 and len(stand_in.generate_calls) == 1  # refused before SGLang
    adapter.sessions.open("s2")
    assert adapter.engine.aborted("s2") is None
    stand_in.finish = {"type": "stop", "matched": stand_in.output_ids[-1]}
    status, _, _ = await post(f"{url}/v1/messages", BODY, sid="s2")
    assert status == 200 and len(await recorded(adapter, "s2")) == 1
    adapter.engine.forget("s1")
    assert adapter.engine.aborted("s1") is None


async def test_routing_key_and_weight_version(stand_in_stack, renderer):
    """A session opened with a ``routing_key`` (slime's per-sample session id) sends it as
    ``X-SMG-Routing-Key``; SGLang's ``meta_info.weight_version`` is kept on the turn."""
    stand_in = SGLangStandIn(ids_of(renderer, "ok"), weight_version="7")
    adapter, url = await stand_in_stack(stand_in)
    adapter.sessions.open("s2", metadata={"routing_key": "slime-uuid-1"})
    await post(f"{url}/v1/messages", BODY, sid="s2")
    await post(f"{url}/v1/messages", BODY, sid="s1")
    keyed, plain = (c["headers"]["X-SMG-Routing-Key"] for c in stand_in.generate_calls)
    assert (keyed, plain) == ("slime-uuid-1", "s1")
    (turn,) = await recorded(adapter, "s2")
    assert turn.weight_version == "7"


async def test_sglang_refusal_is_the_requests_error(stand_in_stack, renderer):
    """SGLang answering 4xx refused the request itself: the client gets 400, and the session
    records nothing the rollout would count as an infrastructure failure."""
    stand_in = SGLangStandIn(ids_of(renderer, "x"), status=400)
    adapter, url = await stand_in_stack(stand_in)
    status, _, text = await post(f"{url}/v1/messages", BODY)
    assert status == 400 and "stand-in refused" in json.loads(text)["error"]["message"]
    assert len(stand_in.generate_calls) == 1  # a 400 is not retried
    assert adapter.sessions.errors("s1") == []


@pytest.mark.parametrize(
    "health, note", [(200, "request: "), (503, "infra: ")], ids=["healthy", "unhealthy"]
)
async def test_sglang_5xx_counts_only_when_a_health_probe_confirms_it(
    stand_in_stack, renderer, health, note
):
    stand_in = SGLangStandIn(ids_of(renderer, "x"), status=500, health=health)
    adapter, url = await stand_in_stack(stand_in)
    status, _, text = await post(f"{url}/v1/messages", BODY)
    assert status == 502 and "stand-in refused" in json.loads(text)["error"]["message"]
    (error,) = adapter.sessions.errors("s1")
    assert error.startswith(note), error
    assert ("health check fails" in error) == (health != 200)


async def test_sglang_client_retries_until_the_server_is_up(renderer):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stand_in = SGLangStandIn(ids_of(renderer, "ok"))
    client = SGLangClient(f"http://127.0.0.1:{port}", connect_retries=6, backoff_s=0.1)

    async def start_late():
        await asyncio.sleep(0.4)
        await stand_in.start(port)

    try:
        gen, _ = await asyncio.gather(client.generate([1, 2, 3], {}, routing_key="k"), start_late())
        assert gen.output_ids == stand_in.output_ids and gen.finish_reason == "stop"
        dead = SGLangClient("http://127.0.0.1:1", connect_retries=1, backoff_s=0.01)
        with pytest.raises(UpstreamError, match="cannot reach SGLang"):
            await dead.generate([1], {}, routing_key="k")
        await dead.close()
    finally:
        await client.close()
        await stand_in.stop()


async def test_sglang_client_timeout_sends_abort(renderer):
    stand_in = SGLangStandIn(ids_of(renderer, "x"), hold=True)
    url = await stand_in.start()
    client = SGLangClient(url, timeout_s=2.0)  # the stand-in never answers: 2 s is a floor
    try:
        with pytest.raises(UpstreamError, match="did not answer") as info:
            await client.generate([1, 2], {}, routing_key="k")
        assert info.value.status == 504
        assert stand_in.aborted == [stand_in.generate_calls[0]["body"]["rid"]]
    finally:
        await client.close()
        await stand_in.stop()


async def test_sglang_client_asks_again_after_a_connection_reset(renderer):
    """A policy server resetting connections for a moment (a restart, a weight update): the
    reply never came, so nothing was recorded; the client aborts the request it lost and asks
    again under a fresh rid. Real TCP resets (a proxy that aborts its first connections)."""
    stand_in = SGLangStandIn(ids_of(renderer, "ok"))
    upstream = await stand_in.start()
    up_port = int(upstream.rsplit(":", 1)[1])
    resets = 2  # the generate request, then the abort of it

    async def front(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal resets
        if resets:
            resets -= 1
            await reader.read(1)  # the request has started
            writer.transport.abort()  # RST
            return
        r2, w2 = await asyncio.open_connection("127.0.0.1", up_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, w2), pipe(r2, writer), return_exceptions=True)

    proxy = await asyncio.start_server(front, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    client = SGLangClient(f"http://127.0.0.1:{port}", connect_retries=3, backoff_s=0.05)
    once = SGLangClient(f"http://127.0.0.1:{port}", connect_retries=0)
    try:
        gen = await client.generate([1, 2, 3], {}, routing_key="k")
        assert gen.output_ids == stand_in.output_ids and resets == 0
        (call,) = stand_in.generate_calls  # the lost request never reached the server
        assert call["body"]["rid"] == gen.rid
        resets = 1  # with no retries left, a reset is the upstream's error, said so
        with pytest.raises(UpstreamError, match="broke off"):
            await once.generate([1], {}, routing_key="k")
    finally:
        await client.close()
        await once.close()
        proxy.close()
        await proxy.wait_closed()
        await stand_in.stop()

"""Session admission (401 / 429 / 503), bad input (400 / 413), upstream failures, and the small
routes (HEAD /, /v1/models, count_tokens) — each answered in the client's own error format."""

from __future__ import annotations

import json
import logging
import socket

import aiohttp
import pytest
from support.adapter_clients import BASH, anthropic_reply, parse_sse, post, recorded

from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer

ANTHROPIC = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "m", "input": "hi"}
GEMINI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
ROUTES = [
    ("/v1/messages", ANTHROPIC),
    ("/v1/chat/completions", CHAT),
    ("/v1/responses", RESPONSES),
    ("/v1beta/models/m:generateContent", GEMINI),
]
IDS = ["anthropic", "chat", "responses", "gemini"]
GOOGLE_STATUS = {  # Google's error shape names the status, not a type
    "authentication_error": "UNAUTHENTICATED",
    "rate_limit_error": "RESOURCE_EXHAUSTED",
    "overloaded_error": "UNAVAILABLE",
    "invalid_request_error": "INVALID_ARGUMENT",
    "request_too_large": "INVALID_ARGUMENT",
    "api_error": "UNAVAILABLE",  # 502: the policy server cannot be reached
}


def assert_error_shape(path: str, text: str, kind: str) -> str:
    body = json.loads(text)
    if path.startswith("/v1beta/"):
        assert set(body) == {"error"} and body["error"]["status"] == GOOGLE_STATUS[kind]
        assert isinstance(body["error"]["code"], int)
    elif path == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == kind
    else:
        assert set(body) == {"error"} and body["error"]["type"] == kind
    return body["error"]["message"]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=IDS)
async def test_unknown_session_is_refused_in_client_format(scripted_stack, path, body):
    adapter, _, url = await scripted_stack({"steps": []})
    status, _, text = await post(url + path, body, sid="nobody")
    assert status == 401
    assert "unknown adapter session" in assert_error_shape(path, text, "authentication_error")
    status, _, text = await post(url + path, body, sid=None)
    assert status == 401 and "no session id" in text
    assert (await recorded(adapter, "nobody")) == []


async def test_session_id_resolution_order(scripted_stack):
    """Authorization: Bearer -> x-api-key; ids in the body (metadata.session_id, user) are not
    credentials: the session is authenticated before the body is read."""
    adapter, _, url = await scripted_stack({"steps": []})
    for sid in ("bearer", "apikey", "meta", "user"):
        adapter.sessions.open(sid)
    both = {"metadata": {"session_id": "meta"}, "user": "user"}
    await post(f"{url}/v1/messages", ANTHROPIC, sid="bearer", headers={"x-api-key": "apikey"})
    await post(f"{url}/v1/messages", ANTHROPIC, sid=None, headers={"x-api-key": "apikey"})
    await post(f"{url}/v1/chat/completions", {**CHAT, **both}, sid="bearer")
    status, _, _ = await post(f"{url}/v1/chat/completions", {**CHAT, **both}, sid=None)
    assert status == 401
    status, _, _ = await post(f"{url}/v1/responses", {**RESPONSES, "user": "user"}, sid=None)
    assert status == 401
    counts = {
        sid: len(await recorded(adapter, sid)) for sid in ("bearer", "apikey", "meta", "user")
    }
    assert counts == {"bearer": 2, "apikey": 1, "meta": 0, "user": 0}


async def test_auto_open_admits_unknown_sessions(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": []}, auto_open=True)
    status, _, _ = await post(f"{url}/v1/messages", ANTHROPIC, sid="fresh")
    assert status == 200 and len(await recorded(adapter, "fresh")) == 1


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=IDS)
async def test_turn_cap_429_and_closed_503(scripted_stack, path, body):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1", max_turns=2)
    for _ in range(2):
        assert (await post(url + path, body))[0] == 200
    status, _, text = await post(url + path, body)
    assert status == 429
    assert "turn limit (2)" in assert_error_shape(path, text, "rate_limit_error")
    adapter.sessions.close("s1")
    status, _, text = await post(url + path, body)
    assert status == 503
    assert "closed" in assert_error_shape(path, text, "overloaded_error")
    assert len(await recorded(adapter, "s1")) == 2  # turns stay readable after close


async def test_refusals_tell_sdk_clients_not_to_retry(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1", max_turns=0)
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/v1/messages", json=ANTHROPIC, headers={"Authorization": "Bearer s1"}
        ) as resp,
    ):
        assert resp.status == 429 and resp.headers["x-should-retry"] == "false"


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=IDS)
async def test_malformed_json_is_400_in_client_format(scripted_stack, path, body):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1")
    status, _, text = await post(url + path, None, raw=b'{"model": "m", "messages": [')
    assert status == 400
    assert "malformed JSON" in assert_error_shape(path, text, "invalid_request_error")
    status, _, text = await post(url + path, None, raw=b"[1, 2]")
    assert status == 400
    status, _, text = await post(url + path, {"model": "m"})
    assert status == 400 and assert_error_shape(path, text, "invalid_request_error")
    assert (await recorded(adapter, "s1")) == []


async def test_oversized_body_is_413(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": []}, client_max_size=10_000)
    adapter.sessions.open("s1")
    big = {**ANTHROPIC, "messages": [{"role": "user", "content": "x" * 20_000}]}
    status, _, text = await post(f"{url}/v1/messages", big)
    assert status == 413
    assert_error_shape("/v1/messages", text, "request_too_large")


async def test_unknown_model_and_invalid_tool_schema_are_not_fatal(scripted_stack, caplog):
    adapter, _, url = await scripted_stack({"steps": [{"shell": "ls"}]})
    adapter.sessions.open("s1")
    broken = {"name": "Broken", "description": "bad schema", "input_schema": "not a schema"}
    body = {**ANTHROPIC, "model": "no-such-model-9000", "tools": [BASH, broken]}
    with caplog.at_level(logging.WARNING, logger="coding_agent_rl.adapter"):
        status, _, text = await post(f"{url}/v1/messages", body)
    assert status == 200
    assert json.loads(text)["content"][0]["input"] == {"command": "ls"}
    assert "invalid parameter schema" in caplog.text
    assert [t["function"]["name"] for t in (await recorded(adapter, "s1"))[0].tools] == [
        "Bash",
        "Broken",
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=IDS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_unreachable_sglang_becomes_an_api_error(renderer, path, body, stream):
    """No SGLang at all (a closed port): the CLI gets an error in its own format, not a hang."""
    adapter = AdapterServer(
        AdapterConfig(
            sglang_url=f"http://127.0.0.1:{_free_port()}",
            renderer=renderer,
            sglang_connect_retries=1,
        )
    )
    url = await adapter.start()
    try:
        adapter.sessions.open("s1")
        if path.startswith("/v1beta/"):  # Gemini: streaming is a method of its own
            streamed = path.replace(":generateContent", ":streamGenerateContent?alt=sse")
            status, _, text = await post(url + (streamed if stream else path), body)
        else:
            status, _, text = await post(url + path, {**body, "stream": stream})
    finally:
        await adapter.stop()
    if path.startswith("/v1beta/") and stream:
        # After the opening chunk, a bare JSON error object: the SDK raises it as an ApiError.
        opened, _, error = text.rpartition("\n\n")
        assert status == 200 and opened.startswith("data: ") and error.startswith('{"error"')
        assert "cannot reach SGLang" in assert_error_shape(path, error, "api_error")
    elif not stream:
        assert status == 502
        assert "cannot reach SGLang" in assert_error_shape(path, text, "api_error")
    else:
        assert status == 200  # the stream had started; the error arrives as its last event
        last_event, last = [e for e in parse_sse(text) if e[1] != "[DONE]"][-1]
        if path == "/v1/messages":
            assert last_event == "error" and last["error"]["type"] == "api_error"
        elif path == "/v1/chat/completions":
            assert "cannot reach SGLang" in last["error"]["message"]
        else:
            assert last_event == "response.failed"
            assert "cannot reach SGLang" in last["response"]["error"]["message"]
    assert (await recorded(adapter, "s1")) == []


async def test_small_routes_need_a_live_session(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("s1")
    key = {"Authorization": "Bearer s1"}
    async with aiohttp.ClientSession() as http:
        async with http.head(f"{url}/", headers=key) as resp:
            assert resp.status == 200
        async with http.get(f"{url}/v1/models", headers=key) as resp:
            assert (await resp.json())["data"][0]["id"] == "policy"
        for path in ("/", "/health", "/v1/models"):
            async with http.get(url + path) as resp:
                assert resp.status == 401, path
            async with http.get(url + path, headers={"x-api-key": "wrong"}) as resp:
                assert resp.status == 401, path
        adapter.sessions.close("s1")
        async with http.get(f"{url}/v1/models", headers=key) as resp:
            assert resp.status == 503  # closed: no longer live


async def test_count_tokens_is_the_real_prompt_length(scripted_stack, renderer):
    adapter, _, url = await scripted_stack({"steps": [{"say": "hello"}]})
    adapter.sessions.open("s1")
    body = {**ANTHROPIC, "tools": [BASH], "system": "Be brief."}
    status, _, text = await post(
        f"{url}/v1/messages/count_tokens?beta=true",
        {k: v for k, v in body.items() if k != "max_tokens"},
    )
    assert status == 200
    counted = json.loads(text)["input_tokens"]
    reply = anthropic_reply((await post(f"{url}/v1/messages", body))[2], False)
    assert (
        counted
        == reply["usage"]["input_tokens"]
        == len((await recorded(adapter, "s1"))[0].prompt_ids)
    )

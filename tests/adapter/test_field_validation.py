"""Malformed request fields, sent the way an agent inside the sandbox can send them (its own
session key, any body): a 400 in the client's own format, nothing the rollout counts as an
infrastructure failure — and the same request without the validation, to show it was a 500."""

from __future__ import annotations

import json

import pytest
from support.adapter_clients import post

from coding_agent_rl.adapter import anthropic, fields, openai_chat, openai_responses

MSG = [{"role": "user", "content": "hi"}]
CASES = [
    ("/v1/messages", {"messages": MSG, "max_tokens": "lots"}, "max_tokens"),
    ("/v1/messages", {"messages": MSG, "max_tokens": 0}, "max_tokens"),
    ("/v1/messages", {"messages": MSG, "max_tokens": True}, "max_tokens"),
    ("/v1/messages", {"messages": MSG, "temperature": "hot"}, "temperature"),
    ("/v1/messages", {"messages": MSG, "temperature": float("nan")}, "temperature"),
    ("/v1/messages", {"messages": MSG, "top_p": 0}, "top_p"),
    ("/v1/messages", {"messages": MSG, "top_k": "x"}, "top_k"),
    ("/v1/messages", {"messages": MSG, "stop_sequences": [1]}, "stop_sequences"),
    ("/v1/messages", {"messages": MSG, "stream": "yes"}, "stream"),
    ("/v1/messages", {"messages": MSG, "tools": ["bash"]}, "tools[0]"),
    ("/v1/messages", {"messages": MSG, "metadata": "me"}, "metadata"),
    ("/v1/messages", {"messages": [{"role": "user", "content": 7}]}, "content"),
    ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": -1}, "max_completion"),
    ("/v1/chat/completions", {"messages": MSG, "stop": {"a": 1}}, "stop"),
    ("/v1/chat/completions", {"messages": MSG, "n": 3}, "n:"),
    ("/v1/chat/completions", {"messages": MSG, "stream_options": []}, "stream_options"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "assistant", "tool_calls": "abc"}, *MSG]},
        "malformed chat request",
    ),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 1.5}, "max_output_tokens"),
    ("/v1/responses", {"input": "hi", "instructions": ["x"]}, "instructions"),
    ("/v1/responses", {"input": [{"type": "message", "role": "user"}, 3]}, "input items"),
]


@pytest.mark.parametrize(("path", "body", "names"), CASES)
async def test_malformed_fields_are_the_clients_error(scripted_stack, path, body, names):
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("agent-key")
    raw = json.dumps({"model": "m", **body}, allow_nan=True)
    status, _, text = await post(url + path, None, raw=raw.encode(), sid="agent-key")
    assert status == 400, text
    err = json.loads(text)["error"]
    assert err["type"] == "invalid_request_error"
    assert names in err["message"], err
    assert adapter.sessions.errors("agent-key") == []
    assert adapter.sessions.turns("agent-key") == []


async def test_without_validation_the_same_fields_were_adapter_failures(
    scripted_stack, monkeypatch
):
    """The round-1 adapter passed fields through: a non-integer max_tokens crashed later (500).
    (tests/rollout/round1.py switches the same defence off for the end-to-end test.)"""
    monkeypatch.setattr(
        fields, "sampling", lambda body, **kw: {"max_new_tokens": body.get("max_tokens")}
    )
    monkeypatch.setattr(fields, "common", lambda body: None)
    for module in (anthropic, openai_chat, openai_responses):
        assert module.fields is fields
    adapter, _, url = await scripted_stack({"steps": []})
    adapter.sessions.open("agent-key")
    body = {"model": "m", "messages": MSG, "max_tokens": "lots"}
    status, _, _ = await post(url + "/v1/messages", body, sid="agent-key")
    assert status == 500
    (error,) = adapter.sessions.errors("agent-key")
    assert error.startswith("request: ")  # an adapter failure a request provoked: not evidence


async def test_valid_edge_values_pass(scripted_stack):
    adapter, _, url = await scripted_stack({"steps": [{"say": "ok"}, {"say": "ok"}]})
    adapter.sessions.open("k")
    body = {
        "model": "m",
        "messages": MSG,
        "max_tokens": 1,
        "temperature": 0,
        "top_p": 1,
        "top_k": 0,
        "stop_sequences": [],
    }
    status, _, text = await post(url + "/v1/messages", body, sid="k")
    assert status == 200, text
    chat = {"model": "m", "messages": MSG, "stop": "END", "n": 1, "top_k": -1}
    status, _, text = await post(url + "/v1/chat/completions", chat, sid="k")
    assert status == 200, text

"""Every wire format, streamed and JSON, over real HTTP against the scripted CPU policy (real
Qwen3 tokenizer): multi-turn capture extends the recorded tokens exactly, and the incremental
prompt equals a full render of the same canonical history."""

from __future__ import annotations

import itertools
import json

import pytest
from support.adapter_clients import (
    BASH,
    anthropic_follow_up,
    anthropic_reply,
    chat_follow_up,
    chat_reply,
    post,
    recorded,
    responses_follow_up,
    responses_reply,
)

from coding_agent_rl.model.parsers import format_tool_calls

SCRIPT = {
    "steps": [
        {"shell": "ls", "think": "Look around first."},
        {"shell": "cat a.txt"},
        {"say": "Finished: the file says hi."},
    ]
}


async def check_turns(adapter, renderer, sid: str, wire: str, n: int) -> list:
    turns = await recorded(adapter, sid)
    assert [t.index for t in turns] == list(range(n))
    assert [t.parent for t in turns] == [None, *range(n - 1)]
    for prev, turn in itertools.pairwise(turns):
        head = prev.prompt_ids + prev.output_ids
        assert turn.prompt_ids[: len(head)] == head
    for turn in turns:
        assert turn.wire == wire and turn.finish_reason == "stop"
        assert len(turn.output_logprobs) == len(turn.output_ids) > 0
        # Canonical history: the incremental prompt is exactly what a full render gives.
        assert turn.prompt_ids == renderer.render(turn.messages, turn.tools or None)
    return turns


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_anthropic_multi_turn(scripted_stack, renderer, stream):
    adapter, _, url = await scripted_stack(SCRIPT)
    adapter.sessions.open("s1")
    body = {
        "model": "claude-sonnet-9",
        "max_tokens": 512,
        "stream": stream,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "x"}}],
        "tools": [BASH],
        "messages": [{"role": "user", "content": "Read a.txt"}],
    }
    status, ctype, text = await post(f"{url}/v1/messages?beta=true", body)
    assert status == 200 and ctype.startswith("text/event-stream" if stream else "application/json")
    reply = anthropic_reply(text, stream)
    assert reply["stop_reason"] == "tool_use" and reply["model"] == "claude-sonnet-9"
    kinds = [b["type"] for b in reply["content"]]
    assert kinds == ["thinking", "tool_use"]
    assert reply["content"][0]["thinking"] == "Look around first."
    use = reply["content"][1]
    assert use["id"].startswith("toolu_") and use["name"] == "Bash"
    assert use["input"] == {"command": "ls"}

    body = anthropic_follow_up(body, reply, ["a.txt\n"])
    reply = anthropic_reply((await post(f"{url}/v1/messages", body))[2], stream)
    assert reply["content"][-1]["input"] == {"command": "cat a.txt"}
    body = anthropic_follow_up(body, reply, ["hi"])
    reply = anthropic_reply((await post(f"{url}/v1/messages", body))[2], stream)
    assert reply["stop_reason"] == "end_turn"
    assert reply["content"] == [{"type": "text", "text": "Finished: the file says hi."}]
    turns = await check_turns(adapter, renderer, "s1", "anthropic", 3)
    assert reply["usage"]["input_tokens"] == len(turns[2].prompt_ids)
    assert reply["usage"]["output_tokens"] == len(turns[2].output_ids)
    assert turns[0].assistant["reasoning_content"] == "Look around first."
    assert turns[2].messages[-1] == {"role": "tool", "name": "Bash", "content": "hi"}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_chat_multi_turn(scripted_stack, renderer, stream):
    adapter, _, url = await scripted_stack(SCRIPT)
    adapter.sessions.open("s1")
    tool = {"type": "function", "function": {"name": "bash", "parameters": BASH["input_schema"]}}
    body = {
        "model": "anything",
        "max_tokens": 512,
        "stream": stream,
        "tools": [tool],
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Read a.txt"}]},
        ],
    }
    status, _, text = await post(f"{url}/v1/chat/completions", body)
    assert status == 200
    reply = chat_reply(text, stream)
    assert reply["finish_reason"] == "tool_calls"
    assert reply["reasoning_content"] == "Look around first."
    call = reply["tool_calls"][0]
    assert call["id"].startswith("call_") and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    body = chat_follow_up(body, reply, ["a.txt"])
    reply = chat_reply((await post(f"{url}/v1/chat/completions", body))[2], stream)
    body = chat_follow_up(body, reply, ["hi"])
    reply = chat_reply((await post(f"{url}/v1/chat/completions", body))[2], stream)
    assert reply["finish_reason"] == "stop"
    assert reply["content"] == "Finished: the file says hi."
    turns = await check_turns(adapter, renderer, "s1", "chat", 3)
    assert turns[0].messages[0] == {"role": "system", "content": "Be brief."}


async def test_chat_several_tool_calls_in_one_turn(scripted_stack, renderer):
    two = format_tool_calls([("bash", {"command": "ls"}), ("bash", {"command": "pwd"})], "qwen25")
    adapter, _, url = await scripted_stack({"steps": [{"say": two}, {"say": "ok"}]})
    adapter.sessions.open("s1")
    tool = {"type": "function", "function": {"name": "bash", "parameters": BASH["input_schema"]}}
    body = {"model": "m", "tools": [tool], "messages": [{"role": "user", "content": "go"}]}
    reply = chat_reply((await post(f"{url}/v1/chat/completions", body))[2], False)
    args = [json.loads(c["function"]["arguments"]) for c in reply["tool_calls"]]
    assert args == [{"command": "ls"}, {"command": "pwd"}]
    body = chat_follow_up(body, reply, ["a.txt", "/work"])
    reply = chat_reply((await post(f"{url}/v1/chat/completions", body))[2], False)
    turns = await check_turns(adapter, renderer, "s1", "chat", 2)
    assert [m["role"] for m in turns[1].messages[-2:]] == ["tool", "tool"]


CODEX_TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a command.",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Apply a patch.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Agents.",
        "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
    },
    {"type": "web_search", "external_web_access": True},
]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_responses_multi_turn(scripted_stack, renderer, stream):
    patch = "*** Begin Patch\n*** Add File: b.txt\n+bye\n*** End Patch"
    script = {
        "steps": [
            {"shell": "cat a.txt", "think": "Look around first."},
            {"tool": {"name": "apply_patch", "arguments": {"input": patch}}},
            {"say": "Finished: the file says hi."},
        ]
    }
    adapter, _, url = await scripted_stack(script)
    adapter.sessions.open("s1")
    body = {
        "model": "gpt-x",
        "stream": stream,
        "instructions": "Be brief.",
        "tools": CODEX_TOOLS,
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Permissions: all."}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Read a.txt"}],
            },
        ],
    }
    status, _, text = await post(f"{url}/v1/responses", body)
    assert status == 200
    reply = responses_reply(text, stream)
    assert reply["id"].startswith("resp_") and reply["status"] == "completed"
    assert reply["usage"]["output_tokens"] > 0
    assert [i["type"] for i in reply["output"]] == ["reasoning", "function_call"]
    call = reply["output"][1]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "cat a.txt"}
    body = responses_follow_up(body, reply, ["hi"])
    reply = responses_reply((await post(f"{url}/v1/responses", body))[2], stream)
    assert [i["type"] for i in reply["output"]] == ["custom_tool_call"]
    assert reply["output"][0]["name"] == "apply_patch" and reply["output"][0]["input"] == patch
    body = responses_follow_up(body, reply, ["Success. Updated: b.txt"])
    reply = responses_reply((await post(f"{url}/v1/responses", body))[2], stream)
    assert reply["output"][0]["content"][0]["text"] == "Finished: the file says hi."
    turns = await check_turns(adapter, renderer, "s1", "responses", 3)
    names = [t["function"]["name"] for t in turns[0].tools]
    assert names == ["exec_command", "apply_patch", "close_agent"]  # web_search dropped
    assert turns[0].messages[:2] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Permissions: all."},
    ]
    assert turns[2].messages[-2]["tool_calls"][0]["function"] == {
        "name": "apply_patch",
        "arguments": {"input": patch},
    }


async def test_responses_namespace_call_carries_its_namespace(scripted_stack):
    script = {"steps": [{"tool": {"name": "close_agent", "arguments": {}}}]}
    adapter, _, url = await scripted_stack(script)
    adapter.sessions.open("s1")
    body = {"model": "m", "tools": CODEX_TOOLS, "input": "close it"}
    reply = responses_reply((await post(f"{url}/v1/responses", body))[2], False)
    assert reply["output"][0]["name"] == "close_agent"
    assert reply["output"][0]["namespace"] == "multi_agent_v1"


async def test_anthropic_text_and_several_calls_round_trip(scripted_stack, renderer):
    calls = format_tool_calls([("Bash", {"command": "ls"}), ("Bash", {"command": "pwd"})], "qwen25")
    adapter, _, url = await scripted_stack(
        {"steps": [{"say": f"Two checks.\n{calls}"}, {"say": "ok"}]}
    )
    adapter.sessions.open("s1")
    body = {
        "model": "m",
        "max_tokens": 300,
        "tools": [BASH],
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    reply = anthropic_reply((await post(f"{url}/v1/messages", body))[2], True)
    assert [b["type"] for b in reply["content"]] == ["text", "tool_use", "tool_use"]
    assert reply["content"][0]["text"] == "Two checks."
    # A CLI that trims or reflows whitespace around text still continues the recorded turn.
    reply["content"][0]["text"] = "  Two checks.\n"
    body = anthropic_follow_up(body, reply, ["a", "b"])
    await post(f"{url}/v1/messages", body)
    await check_turns(adapter, renderer, "s1", "anthropic", 2)


async def test_qwen3_coder_tool_format_end_to_end(scripted_stack, renderer):
    adapter, _, url = await scripted_stack(SCRIPT, tool_parser="qwen3_coder")
    adapter.sessions.open("s1")
    body = {
        "model": "m",
        "max_tokens": 300,
        "tools": [BASH],
        "messages": [{"role": "user", "content": "go"}],
    }
    reply = anthropic_reply((await post(f"{url}/v1/messages", body))[2], False)
    assert reply["content"][-1]["input"] == {"command": "ls"}
    text = renderer.tokenizer.decode((await recorded(adapter, "s1"))[0].output_ids)
    assert "<function=Bash>" in text

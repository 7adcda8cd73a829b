"""Minimal clients of the three wire formats for tests: send a request over real HTTP, read the
reply (SSE or JSON) back into one dict, and build the follow-up request a CLI would send."""

from __future__ import annotations

import io
import json
from typing import Any

import aiohttp

BASH = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def parse_sse(text: str) -> list[tuple[str | None, Any]]:
    events = []
    for block in text.split("\n\n"):
        event, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            raw = "\n".join(data)
            events.append((event, raw if raw == "[DONE]" else json.loads(raw)))
    return events


async def post(
    url: str,
    body: Any,
    *,
    sid: str | None = "s1",
    raw: bytes | None = None,
    headers: dict | None = None,
) -> tuple[int, str, str]:
    hdrs = {"Authorization": f"Bearer {sid}"} if sid else {}
    hdrs.update(headers or {})
    async with aiohttp.ClientSession() as http:
        # A file-like body: aiohttp warns (ResourceWarning) on large raw bytes.
        kwargs = {"data": io.BytesIO(raw)} if raw is not None else {"json": body}
        async with http.post(url, headers=hdrs, **kwargs) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def recorded(adapter, sid: str) -> list:
    """The session's turns once no request is in flight (turns are recorded after the reply)."""
    assert await adapter.sessions.settled(sid, timeout=10)
    return adapter.sessions.turns(sid)


# -- Anthropic --


def anthropic_reply(text: str, stream: bool) -> dict[str, Any]:
    """The reply as a Messages JSON body (a stream is reassembled from its events)."""
    if not stream:
        return json.loads(text)
    events = parse_sse(text)
    names = [e for e, _ in events if e != "ping"]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    message = events[0][1]["message"]
    blocks: dict[int, dict] = {}
    for _, data in events:
        if data["type"] == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif data["type"] == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                block["_json"] = block.get("_json", "") + delta["partial_json"]
        elif data["type"] == "message_delta":
            message.update(data["delta"])
            message["usage"] = data["usage"]
    for block in blocks.values():
        if "_json" in block:
            block["input"] = json.loads(block.pop("_json"))
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def anthropic_follow_up(body: dict, reply: dict, results: list[str]) -> dict:
    """The next request: the reply appended as the assistant turn, then one result per call."""
    uses = [b for b in reply["content"] if b["type"] == "tool_use"]
    user = [
        {
            "type": "tool_result",
            "tool_use_id": u["id"],
            "content": r,
            "cache_control": {"type": "ephemeral"},
        }
        for u, r in zip(uses, results, strict=True)
    ]
    return {
        **body,
        "messages": [
            *body["messages"],
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": user},
        ],
    }


# -- OpenAI Chat --


def chat_reply(text: str, stream: bool) -> dict[str, Any]:
    """The reply's ``choices[0].message`` plus ``finish_reason``."""
    if not stream:
        choice = json.loads(text)["choices"][0]
        return {**choice["message"], "finish_reason": choice["finish_reason"]}
    events = parse_sse(text)
    assert events[-1][1] == "[DONE]"
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    calls: dict[int, dict] = {}
    finish = None
    for _, chunk in events[:-1]:
        if not chunk.get("choices"):
            continue
        choice = chunk["choices"][0]
        delta = choice["delta"]
        message["content"] += delta.get("content") or ""
        if delta.get("reasoning_content"):
            message["reasoning_content"] = (
                message.get("reasoning_content", "") + delta["reasoning_content"]
            )
        for call in delta.get("tool_calls") or []:
            slot = calls.setdefault(
                call["index"],
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            slot["id"] = call.get("id") or slot["id"]
            slot["function"]["name"] += call["function"].get("name") or ""
            slot["function"]["arguments"] += call["function"].get("arguments") or ""
        finish = choice["finish_reason"] or finish
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    message["finish_reason"] = finish
    return message


def chat_follow_up(body: dict, reply: dict, results: list[str]) -> dict:
    assistant = {k: v for k, v in reply.items() if k != "finish_reason"}
    tools = [
        {"role": "tool", "tool_call_id": c["id"], "content": r}
        for c, r in zip(reply.get("tool_calls") or [], results, strict=True)
    ]
    return {**body, "messages": [*body["messages"], assistant, *tools]}


# -- OpenAI Responses --


def responses_reply(text: str, stream: bool) -> dict[str, Any]:
    """The final response object (from ``response.completed`` when streaming)."""
    if not stream:
        return json.loads(text)
    events = parse_sse(text)
    kinds = [e for e, _ in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    done_items = [d["item"] for e, d in events if e == "response.output_item.done"]
    final = events[-1][1]["response"]
    assert final["output"] == done_items
    return final


def responses_follow_up(body: dict, reply: dict, results: list[str]) -> dict:
    calls = [i for i in reply["output"] if i["type"] in ("function_call", "custom_tool_call")]
    outputs = [
        {
            "type": (
                "custom_tool_call_output"
                if c["type"] == "custom_tool_call"
                else "function_call_output"
            ),
            "call_id": c["call_id"],
            "output": r,
        }
        for c, r in zip(calls, results, strict=True)
    ]
    return {**body, "input": [*body["input"], *reply["output"], *outputs]}


# -- Gemini --


def gemini_reply(text: str, stream: bool) -> dict[str, Any]:
    """The reply as one ``GenerateContentResponse``: a stream's chunks have their parts joined,
    the last chunk's finish reason and usage kept. Every stream chunk must be what the
    ``@google/genai`` SDK reads: a ``data: <json>`` line and a blank line, nothing else."""
    if not stream:
        return json.loads(text)
    chunks = []
    rest = text
    while rest:
        head, sep, rest = rest.partition("\n\n")
        assert sep and head.startswith("data: "), f"not a data chunk: {head[:200]!r}"
        chunks.append(json.loads(head[6:]))
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    final = chunks[-1]
    assert "finishReason" in final["candidates"][0] and "usageMetadata" in final
    final["candidates"][0]["content"]["parts"] = parts
    return final


def gemini_follow_up(body: dict, reply: dict, results: list[str]) -> dict:
    """The next request as Gemini CLI builds it: the model content without its thought parts,
    then one user content with a ``functionResponse`` per call."""
    parts = reply["candidates"][0]["content"]["parts"]
    calls = [p["functionCall"] for p in parts if "functionCall" in p]
    model = {"role": "model", "parts": [p for p in parts if not p.get("thought")]}
    responses = [
        {"functionResponse": {"name": c["name"], "response": {"output": r}}}
        for c, r in zip(calls, results, strict=True)
    ]
    return {**body, "contents": [*body["contents"], model, {"role": "user", "parts": responses}]}

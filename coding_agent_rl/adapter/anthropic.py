"""Anthropic Messages (``POST /v1/messages``), as Claude Code speaks it."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from coding_agent_rl.adapter import canonical as C
from coding_agent_rl.adapter import fields, pictures
from coding_agent_rl.adapter.errors import AdapterError, BadRequest
from coding_agent_rl.adapter.wire import Reply, WireFormat, WireRequest, new_id, sse

log = logging.getLogger(__name__)

# Claude Code puts transport metadata in the first system block; it carries version strings that
# mean nothing to the policy and may change between requests, so it is not part of the prompt.
BILLING_PREFIX = "x-anthropic-billing-header:"


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content]
    if content is None:
        return []
    raise BadRequest("message content must be a string or a list of content blocks")


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text" or (kind is None and "text" in block):
        return str(block.get("text") or "")
    if kind == "image":
        return C.IMAGE_PLACEHOLDER
    if kind == "document" and isinstance(block.get("source"), dict):
        source = block["source"]
        if source.get("type") == "text":
            return str(source.get("data") or "")
    return f"[{kind} omitted]"


def _text_of(content: Any) -> str:
    return C.join_text([_block_text(b) for b in _blocks(content)])


def _item(block: dict[str, Any]) -> Any:
    """An image block as is (see ``images.py``), anything else as its text."""
    return block if block.get("type") == "image" else _block_text(block)


class AnthropicMessages(WireFormat):
    name = "anthropic"

    def __init__(self) -> None:
        self.message_id = new_id("msg_")

    # -- request --

    def parse(self, body: dict[str, Any]) -> WireRequest:
        fields.common(body)
        sampling = self._sampling(body)
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise BadRequest("messages: a non-empty list is required")
        messages: list[dict[str, Any]] = []
        system = self._system_text(body.get("system"))
        if system:
            messages.append({"role": "system", "content": system})
        names: dict[str, str] = {}  # tool_use id -> tool name (tool_result carries only the id)
        for raw in raw_messages:
            if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant", "system"):
                raise BadRequest("each message needs role user, assistant or system")
            if raw["role"] == "assistant":
                messages.append(self._assistant(raw.get("content"), names))
            elif raw["role"] == "system":
                self._fold_system(messages, _text_of(raw.get("content")))
            else:
                self._user(messages, raw.get("content"), names)
        return WireRequest(
            messages=messages,
            tools=self._tools(body.get("tools")),
            sampling=sampling,
            stream=bool(body.get("stream")),
            model=str(body.get("model") or ""),
        )

    def _system_text(self, system: Any) -> str:
        if system is None:
            return ""
        blocks = _blocks(system)
        texts = [_block_text(b) for b in blocks]
        return C.join_text([t for t in texts if not t.startswith(BILLING_PREFIX)])

    def _assistant(self, content: Any, names: dict[str, str]) -> dict[str, Any]:
        texts, thoughts, calls = [], [], []
        for block in _blocks(content):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind == "thinking":
                thoughts.append(str(block.get("thinking") or ""))
            elif kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
                calls.append(C.tool_call(str(block.get("name")), block.get("input")))
            else:  # redacted_thinking, server_tool_use, ...: nothing the policy produced
                log.debug("ignoring assistant block of type %r", kind)
        return C.assistant(C.join_text(texts), C.join_text(thoughts), calls)

    def _user(self, messages: list[dict[str, Any]], content: Any, names: dict[str, str]) -> None:
        texts: list[Any] = []

        def flush() -> None:
            if texts:
                messages.append({"role": "user", "content": pictures.content(texts)})
                texts.clear()

        for block in _blocks(content):
            if block.get("type") == "tool_result":
                flush()
                result = pictures.content([_item(b) for b in _blocks(block.get("content"))])
                if block.get("is_error"):
                    result = pictures.prefix_text(result, "Error: ")
                tool_msg = {"role": "tool", "content": result}
                name = names.get(str(block.get("tool_use_id")))
                if name:
                    tool_msg["name"] = name
                messages.append(tool_msg)
            else:
                texts.append(_item(block))
        flush()

    @staticmethod
    def _fold_system(messages: list[dict[str, Any]], text: str) -> None:
        """A mid-conversation system message joins the previous user turn as a reminder."""
        reminder = f"<system-reminder>\n{text}\n</system-reminder>"
        if messages and messages[-1]["role"] == "user":
            messages[-1] = {
                **messages[-1],
                "content": pictures.append_text(messages[-1]["content"], reminder),
            }
        else:
            messages.append({"role": "user", "content": reminder})

    @staticmethod
    def _tools(tools: Any) -> list[dict[str, Any]]:
        out = []
        for tool in tools or []:
            if not isinstance(tool, dict):
                log.warning("ignoring a tool that is not an object")
                continue
            if "input_schema" not in tool and tool.get("type") not in (None, "custom"):
                log.debug("dropping server tool %r (%s)", tool.get("name"), tool.get("type"))
                continue
            fn = C.function_tool(
                tool.get("name"), tool.get("description"), tool.get("input_schema")
            )
            if fn:
                out.append(fn)
        return out

    @staticmethod
    def _sampling(body: dict[str, Any]) -> dict[str, Any]:
        return fields.sampling(body, max_tokens=("max_tokens",), stop="stop_sequences")

    # -- reply --

    def _stop_reason(self, reply: Reply) -> str:
        if reply.truncated:
            return "max_tokens"
        if reply.tool_calls:
            return "tool_use"
        return "stop_sequence" if reply.matched_stop else "end_turn"

    def _content(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.reasoning:
            signature = hashlib.sha256(reply.reasoning.encode()).hexdigest()[:32]
            blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            args = call.get("arguments")
            blocks.append(
                {
                    "type": "tool_use",
                    "id": new_id("toolu_"),
                    "name": call.get("name"),
                    "input": args if isinstance(args, dict) else {"input": args},
                }
            )
        return blocks

    def _usage(self, reply: Reply) -> dict[str, int]:
        return {
            "input_tokens": reply.prompt_tokens - reply.cached_tokens,
            "output_tokens": reply.completion_tokens,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
        }

    def json_body(self, reply: Reply) -> dict[str, Any]:
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": self._content(reply),
            "stop_reason": self._stop_reason(reply),
            "stop_sequence": reply.matched_stop,
            "usage": self._usage(reply),
        }

    def stream_open(self, model: str, prompt_tokens: int) -> bytes:
        start = {
            "type": "message_start",
            "message": {
                "id": self.message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": 0},
            },
        }
        return sse(start, "message_start") + self.heartbeat()

    def stream_reply(self, reply: Reply) -> bytes:
        out = []
        for index, block in enumerate(self._content(reply)):
            kind = block["type"]
            empty = {"thinking": {"thinking": "", "signature": ""}, "text": {"text": ""}}
            start = {**block, **empty.get(kind, {"input": {}})}
            out.append(
                sse(
                    {"type": "content_block_start", "index": index, "content_block": start},
                    "content_block_start",
                )
            )
            if kind == "thinking":
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ]
            elif kind == "text":
                deltas = [{"type": "text_delta", "text": block["text"]}]
            else:
                deltas = [
                    {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"], ensure_ascii=False),
                    }
                ]
            for delta in deltas:
                out.append(
                    sse(
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        "content_block_delta",
                    )
                )
            out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self._stop_reason(reply), "stop_sequence": reply.matched_stop},
            "usage": self._usage(reply),
        }
        out.append(sse(delta, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return b"".join(out)

    def heartbeat(self) -> bytes:
        return sse({"type": "ping"}, "ping")

    def error_body(self, err: AdapterError) -> dict[str, Any]:
        return {"type": "error", "error": {"type": err.kind, "message": err.message}}

    def stream_error(self, err: AdapterError) -> bytes:
        return sse(self.error_body(err), "error")

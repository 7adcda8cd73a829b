"""OpenAI Chat Completions (``POST /v1/chat/completions``), e.g. mini-swe-agent via litellm."""

from __future__ import annotations

import logging
import time
from typing import Any

from coding_agent_rl.adapter import canonical as C
from coding_agent_rl.adapter import fields, pictures
from coding_agent_rl.adapter.errors import AdapterError, BadRequest
from coding_agent_rl.adapter.wire import Reply, WireFormat, WireRequest, new_id, sse

log = logging.getLogger(__name__)


def content_text(content: Any) -> str:
    """Text of an OpenAI ``content`` (a string or a list of parts); images become a placeholder."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest("content must be a string or a list of parts")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict):
            continue
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") in ("image_url", "input_image", "image"):
            texts.append(C.IMAGE_PLACEHOLDER)
        elif isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
    return C.join_text(texts)


def content_parts(content: Any) -> str | list[dict[str, Any]]:
    """A user / tool ``content``: its text, or with an image part the parts (``images.py``)."""
    if isinstance(content, list) and any(pictures.is_image_part(p) for p in content):
        return pictures.content(
            [p if pictures.is_image_part(p) else content_text([p]) for p in content]
        )
    return content_text(content)


class OpenAIChat(WireFormat):
    name = "chat"

    def __init__(self) -> None:
        self.completion_id = new_id("chatcmpl-")
        self.created = int(time.time())
        self.include_usage = False

    def parse(self, body: dict[str, Any]) -> WireRequest:
        fields.common(body)
        sampling = self._sampling(body)
        if fields.opt_int(body, "n", minimum=1) not in (None, 1):
            raise BadRequest("n: only one choice per request is supported")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise BadRequest("messages: a non-empty list is required")
        messages: list[dict[str, Any]] = []
        names: dict[str, str] = {}  # tool_call_id -> function name
        for raw in raw_messages:
            role = raw.get("role") if isinstance(raw, dict) else None
            if role in ("system", "developer"):
                messages.append({"role": "system", "content": content_text(raw.get("content"))})
            elif role == "user":
                messages.append({"role": "user", "content": content_parts(raw.get("content"))})
            elif role == "assistant":
                messages.append(self._assistant(raw, names))
            elif role in ("tool", "function"):
                tool_msg = {"role": "tool", "content": content_parts(raw.get("content"))}
                name = raw.get("name") or names.get(str(raw.get("tool_call_id")))
                if name:
                    tool_msg["name"] = name
                messages.append(tool_msg)
            else:
                raise BadRequest(f"unsupported message role {role!r}")
        options = fields.opt_object(body, "stream_options")
        self.include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return WireRequest(
            messages=messages,
            tools=self._tools(body),
            sampling=sampling,
            stream=bool(body.get("stream")),
            model=str(body.get("model") or ""),
        )

    @staticmethod
    def _assistant(raw: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
        calls = []
        raw_calls = list(raw.get("tool_calls") or [])
        if isinstance(raw.get("function_call"), dict):  # the legacy single-call field
            raw_calls.append({"function": raw["function_call"]})
        for call in raw_calls:
            fn = call.get("function") or {}
            if call.get("id"):
                names[str(call["id"])] = str(fn.get("name"))
            calls.append(C.tool_call(str(fn.get("name")), fn.get("arguments")))
        reasoning = raw.get("reasoning_content") or raw.get("reasoning") or ""
        return C.assistant(content_text(raw.get("content")), str(reasoning), calls)

    @staticmethod
    def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
        specs = [
            t.get("function") if isinstance(t, dict) else None for t in body.get("tools") or []
        ]
        specs += list(body.get("functions") or [])  # legacy
        out = []
        for spec in specs:
            if not isinstance(spec, dict):
                log.warning("ignoring a tool that is not a function definition")
                continue
            tool = C.function_tool(
                spec.get("name"), spec.get("description"), spec.get("parameters")
            )
            if tool:
                out.append(tool)
        return out

    @staticmethod
    def _sampling(body: dict[str, Any]) -> dict[str, Any]:
        return fields.sampling(
            body,
            max_tokens=("max_completion_tokens", "max_tokens"),
            stop="stop",
            stop_single_ok=True,
        )

    # -- reply --

    @staticmethod
    def _finish(reply: Reply) -> str:
        if reply.truncated:
            return "length"
        return "tool_calls" if reply.tool_calls else "stop"

    def _calls(self, reply: Reply) -> list[dict[str, Any]]:
        return [
            {
                "id": new_id("call_"),
                "type": "function",
                "function": {
                    "name": c.get("name"),
                    "arguments": C.arguments_json(c.get("arguments")),
                },
            }
            for c in reply.tool_calls
        ]

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        return {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }

    def _envelope(self, model: str, kind: str) -> dict[str, Any]:
        return {"id": self.completion_id, "object": kind, "created": self.created, "model": model}

    def json_body(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = self._calls(reply)
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": self._finish(reply),
            "logprobs": None,
        }
        return {
            **self._envelope(reply.model, "chat.completion"),
            "choices": [choice],
            "usage": self._usage(reply),
        }

    def _chunk(self, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse({**self._envelope(model, "chat.completion.chunk"), "choices": [choice]})

    def stream_open(self, model: str, prompt_tokens: int) -> bytes:
        return self._chunk(model, {"role": "assistant", "content": ""})

    def stream_reply(self, reply: Reply) -> bytes:
        out = []
        if reply.reasoning:
            out.append(self._chunk(reply.model, {"reasoning_content": reply.reasoning}))
        if reply.text:
            out.append(self._chunk(reply.model, {"content": reply.text}))
        for index, call in enumerate(self._calls(reply)):
            out.append(self._chunk(reply.model, {"tool_calls": [{"index": index, **call}]}))
        out.append(self._chunk(reply.model, {}, self._finish(reply)))
        if self.include_usage:
            usage = {
                **self._envelope(reply.model, "chat.completion.chunk"),
                "choices": [],
                "usage": self._usage(reply),
            }
            out.append(sse(usage))
        out.append(sse("[DONE]"))
        return b"".join(out)

    def error_body(self, err: AdapterError) -> dict[str, Any]:
        return {
            "error": {"message": err.message, "type": err.kind, "param": None, "code": err.status}
        }

    def stream_error(self, err: AdapterError) -> bytes:
        return sse(self.error_body(err)) + sse("[DONE]")

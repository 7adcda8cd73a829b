"""OpenAI Responses (``POST /v1/responses``), the only API Codex speaks.

Custom (freeform) tools such as Codex's ``apply_patch`` become, in canonical form, a function
with one string parameter ``input``; a call to one is answered as a ``custom_tool_call``.
``namespace`` tools are flattened to their member functions; hosted tools (``web_search``, ...)
are dropped: the policy cannot run them.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from coding_agent_rl.adapter import canonical as C
from coding_agent_rl.adapter import fields
from coding_agent_rl.adapter.errors import AdapterError, BadRequest
from coding_agent_rl.adapter.openai_chat import content_parts, content_text
from coding_agent_rl.adapter.wire import Reply, WireFormat, WireRequest, new_id, sse

log = logging.getLogger(__name__)

ASSISTANT_ITEMS = ("reasoning", "function_call", "custom_tool_call")


def _custom_tool(tool: dict[str, Any]) -> dict[str, Any] | None:
    fmt: dict[str, Any] = tool["format"] if isinstance(tool.get("format"), dict) else {}
    hint = "The raw input for this tool"
    if fmt.get("type") == "grammar" and fmt.get("definition"):
        hint += f" ({fmt.get('syntax', 'grammar')} grammar):\n{fmt['definition']}"
    params = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": hint}},
        "required": ["input"],
    }
    return C.function_tool(tool.get("name"), tool.get("description"), params)


def _reasoning_text(item: dict[str, Any]) -> str:
    parts = [p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict)]
    if not any(parts):
        parts = [p.get("text", "") for p in item.get("summary") or [] if isinstance(p, dict)]
    return C.join_text([str(p) for p in parts])


class _Assistant:
    """Consecutive assistant-side items (reasoning, message, calls) of one model turn."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def starts_new_turn(self, kind: str) -> bool:
        # Our replies are ordered reasoning, message, calls: anything "earlier" starts a new turn.
        if kind == "reasoning":
            return bool(self.texts or self.calls or self.thoughts)
        if kind == "message":
            return bool(self.texts or self.calls)
        return False

    def message(self) -> dict[str, Any]:
        return C.assistant(C.join_text(self.texts), C.join_text(self.thoughts), self.calls)


class OpenAIResponses(WireFormat):
    name = "responses"

    def __init__(self) -> None:
        self.response_id = new_id("resp_")
        self.created = int(time.time())
        self.custom_tools: set[str] = set()
        self.namespaces: dict[str, str] = {}
        self._seq = 0

    # -- request --

    def parse(self, body: dict[str, Any]) -> WireRequest:
        fields.common(body)
        fields.opt_str(body, "instructions")
        sampling = self._sampling(body)
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        if not isinstance(items, list) or not items:
            raise BadRequest("input: a non-empty string or list of items is required")
        tools = self._tools(body.get("tools"))
        messages: list[dict[str, Any]] = []
        if body.get("instructions"):
            messages.append({"role": "system", "content": str(body["instructions"])})
        names: dict[str, str] = {}
        turn: _Assistant | None = None
        for item in items:
            if not isinstance(item, dict):
                raise BadRequest("input items must be objects")
            kind = str(item.get("type") or ("message" if "role" in item else ""))
            is_assistant = kind in ASSISTANT_ITEMS or (
                kind == "message" and item.get("role") == "assistant"
            )
            if turn is not None and (not is_assistant or turn.starts_new_turn(kind)):
                messages.append(turn.message())
                turn = None
            if is_assistant:
                turn = turn or _Assistant()
                self._assistant_item(turn, kind, item, names)
            elif kind == "message":
                role = item.get("role")
                role = "system" if role in ("developer", "system") else role
                if role not in ("user", "system"):
                    raise BadRequest(f"unsupported message role {item.get('role')!r}")
                text = content_parts if role == "user" else content_text
                messages.append({"role": role, "content": text(item.get("content"))})
            elif kind in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                tool_msg = {"role": "tool", "content": content_parts(output)}
                name = names.get(str(item.get("call_id")))
                if name:
                    tool_msg["name"] = name
                messages.append(tool_msg)
            else:
                log.debug("ignoring input item of type %r", kind)
        if turn is not None:
            messages.append(turn.message())
        return WireRequest(
            messages=messages,
            tools=tools,
            sampling=sampling,
            stream=bool(body.get("stream")),
            model=str(body.get("model") or ""),
        )

    @staticmethod
    def _assistant_item(turn: _Assistant, kind: str, item: dict, names: dict[str, str]) -> None:
        if kind == "reasoning":
            turn.thoughts.append(_reasoning_text(item))
        elif kind == "message":
            turn.texts.append(content_text(item.get("content")))
        elif kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
            turn.calls.append(C.tool_call(str(item.get("name")), item.get("arguments")))
        else:  # custom_tool_call
            names[str(item.get("call_id"))] = str(item.get("name"))
            turn.calls.append(C.tool_call(str(item.get("name")), {"input": item.get("input", "")}))

    def _tools(self, tools: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any] | None] = []
        for tool in tools or []:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind == "function":
                out.append(
                    C.function_tool(
                        tool.get("name"), tool.get("description"), tool.get("parameters")
                    )
                )
            elif kind == "custom":
                self.custom_tools.add(str(tool.get("name")))
                out.append(_custom_tool(tool))
            elif kind == "namespace":
                for member in tool.get("tools") or []:
                    if isinstance(member, dict) and member.get("type") == "function":
                        self.namespaces[str(member.get("name"))] = str(tool.get("name"))
                        out.append(
                            C.function_tool(
                                member.get("name"),
                                member.get("description"),
                                member.get("parameters"),
                            )
                        )
            else:
                log.debug("dropping hosted tool of type %r", kind)
        return [t for t in out if t]

    @staticmethod
    def _sampling(body: dict[str, Any]) -> dict[str, Any]:
        return fields.sampling(body, max_tokens=("max_output_tokens",), stop=None, top_k=False)

    # -- reply --

    def _output(self, reply: Reply) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.reasoning:
            items.append(
                {
                    "type": "reasoning",
                    "id": new_id("rs_"),
                    "summary": [{"type": "summary_text", "text": reply.reasoning}],
                    "content": [{"type": "reasoning_text", "text": reply.reasoning}],
                }
            )
        if reply.text:
            items.append(
                {
                    "type": "message",
                    "id": new_id("msg_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call in reply.tool_calls:
            name, args = str(call.get("name")), call.get("arguments")
            if name in self.custom_tools:
                raw = args.get("input") if isinstance(args, dict) else args
                items.append(
                    {
                        "type": "custom_tool_call",
                        "id": new_id("ctc_"),
                        "call_id": new_id("call_"),
                        "name": name,
                        "input": raw if isinstance(raw, str) else json.dumps(raw),
                        "status": "completed",
                    }
                )
                continue
            item = {
                "type": "function_call",
                "id": new_id("fc_"),
                "call_id": new_id("call_"),
                "name": name,
                "arguments": C.arguments_json(args),
                "status": "completed",
            }
            if name in self.namespaces:
                item["namespace"] = self.namespaces[name]
            items.append(item)
        return items

    def _response(self, model: str, status: str, output: list, usage: Any) -> dict[str, Any]:
        body = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": model,
            "output": output,
            "usage": usage,
            "error": None,
            "incomplete_details": None,
        }
        if status == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        return body

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        return {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }

    def json_body(self, reply: Reply) -> dict[str, Any]:
        status = "incomplete" if reply.truncated else "completed"
        return self._response(reply.model, status, self._output(reply), self._usage(reply))

    def _event(self, kind: str, **fields: Any) -> bytes:
        self._seq += 1
        return sse({"type": kind, "sequence_number": self._seq, **fields}, kind)

    def stream_open(self, model: str, prompt_tokens: int) -> bytes:
        response = self._response(model, "in_progress", [], None)
        return self._event("response.created", response=response) + self._event(
            "response.in_progress", response=response
        )

    def stream_reply(self, reply: Reply) -> bytes:
        out = []
        output = self._output(reply)
        for index, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                part = {"type": "output_text", "text": "", "annotations": []}
                out.append(
                    self._event(
                        "response.output_item.added",
                        output_index=index,
                        item={**item, "status": "in_progress", "content": []},
                    )
                )
                ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
                out.append(self._event("response.content_part.added", **ids, part=part))
                out.append(self._event("response.output_text.delta", **ids, delta=text))
                out.append(self._event("response.output_text.done", **ids, text=text))
                out.append(
                    self._event("response.content_part.done", **ids, part={**part, "text": text})
                )
            else:
                out.append(self._event("response.output_item.added", output_index=index, item=item))
            out.append(self._event("response.output_item.done", output_index=index, item=item))
        status = "incomplete" if reply.truncated else "completed"
        response = self._response(reply.model, status, output, self._usage(reply))
        out.append(self._event("response.completed", response=response))
        return b"".join(out)

    def heartbeat(self) -> bytes:
        return b": keepalive\n\n"

    def error_body(self, err: AdapterError) -> dict[str, Any]:
        return {
            "error": {"message": err.message, "type": err.kind, "param": None, "code": err.kind}
        }

    def stream_error(self, err: AdapterError) -> bytes:
        response = self._response("", "failed", [], None)
        response["error"] = {
            "code": "server_error" if err.status >= 500 else err.kind,
            "message": err.message,
        }
        return self._event("response.failed", response=response)

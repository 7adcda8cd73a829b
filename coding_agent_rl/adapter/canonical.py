"""Canonical-message helpers shared by the wire formats, and the identity used to match turns.

Two messages are "the same" for incremental rendering when their keys are equal. The key is
deliberately tolerant of what agent CLIs do to a replayed history:

* wire ids are not part of canonical messages at all;
* images (content parts, only where a message shows one) by their payload's hash;
* text is compared with surrounding whitespace stripped (CLIs trim assistant text; our template
  trims it too, so the rendered tokens cannot differ);
* tool-call arguments are compared as sorted JSON of the parsed object;
* ``reasoning_content`` and a tool message's ``name`` are ignored: clients drop or keep
  reasoning at will, and the recorded *tokens* (not the text) are what a continuation reuses.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from coding_agent_rl.multimodal.parts import content_key

log = logging.getLogger(__name__)

IMAGE_PLACEHOLDER = "[image omitted]"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def message_key(message: dict[str, Any]) -> bytes:
    role = message.get("role")
    parts: list[Any] = [role, content_key(message.get("content"))]
    if role == "assistant":
        calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            calls.append([fn.get("name"), _dumps(fn.get("arguments"))])
        parts.append(calls)
    return hashlib.blake2b(_dumps(parts).encode(), digest_size=16).digest()


def tools_key(tools: list[dict[str, Any]]) -> bytes:
    return hashlib.blake2b(_dumps(tools).encode(), digest_size=16).digest()


def function_tool(name: object, description: object, parameters: object) -> dict[str, Any] | None:
    """A canonical tool from a request's (unchecked) JSON: no name drops it; an invalid schema is
    logged and replaced by an open object schema."""
    if not isinstance(name, str) or not name:
        log.warning("dropping a tool without a name")
        return None
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    elif not isinstance(parameters, dict):
        log.warning(
            "tool %r has an invalid parameter schema (%s); using an open object schema",
            name,
            type(parameters).__name__,
        )
        parameters = {"type": "object"}
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    fn["parameters"] = parameters
    return {"type": "function", "function": fn}


def parse_arguments(raw: Any) -> Any:
    """Tool-call arguments as an object: JSON strings are parsed; unparsable text is kept as is."""
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return {} if raw is None else raw


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": parse_arguments(arguments)}}


def assistant(content: str, reasoning: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def join_text(parts: list[str]) -> str:
    return "\n".join(p for p in parts if p)


def arguments_json(arguments: Any) -> str:
    """Arguments as the JSON string OpenAI formats carry."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)

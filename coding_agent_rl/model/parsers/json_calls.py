"""JSON tool calls inside ``<tool_call>`` tags: SGLang's ``qwen25`` and ``hermes`` formats.

Emitted text (Qwen2.5 / Qwen3, and our chat template)::

    <tool_call>
    {"name": "f", "arguments": {"k": 1}}
    </tool_call>

Several calls are separated by a newline. ``hermes`` (NousResearch Hermes 2 Pro) emits the same
blocks; parsing is whitespace-tolerant for both. A block may hold a JSON list of calls.
"""

from __future__ import annotations

import json
from typing import Any

from coding_agent_rl.model.parsers.common import (
    CALL_CLOSE,
    CALL_OPEN,
    ToolParse,
    blocks,
    inner,
    join_content,
    known,
    tool_call,
    tool_schemas,
)


def _arguments(obj: dict) -> dict | None:
    # SGLang accepts "parameters" as an alias of "arguments".
    args = obj.get("arguments", obj.get("parameters", {}))
    if args is None:
        return {}
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    return args if isinstance(args, dict) else None


class JsonToolCalls:
    def __init__(self, name: str):
        self.name = name

    def parse(self, text: str, tools: list[dict] | None) -> ToolParse:
        schemas = tool_schemas(tools)
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        errors: list[str] = []
        for kind, chunk in blocks(text):
            if kind == "text":
                content.append(chunk)
                continue
            before = len(calls)
            if kind == "unclosed":
                errors.append(f"{CALL_OPEN} without {CALL_CLOSE}")
            else:
                found, error = self._decode(inner(chunk))
                if error:
                    errors.append(error)
                elif all(known(name, schemas) for name, _ in found):
                    calls.extend(tool_call(name, args) for name, args in found)
            if len(calls) == before:  # not a recognised call: the raw block stays as text
                content.append(chunk)
        return ToolParse(join_content(content), calls, errors)

    @staticmethod
    def _decode(body: str) -> tuple[list[tuple[str, dict]], str | None]:
        try:
            obj = json.loads(body)
        except ValueError as e:
            return [], f"tool call is not valid JSON ({e}): {body.strip()[:200]!r}"
        found: list[tuple[str, dict]] = []
        for item in obj if isinstance(obj, list) else [obj]:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                return [], f"tool call JSON has no string 'name': {body.strip()[:200]!r}"
            args = _arguments(item)
            if args is None:
                return [], f"tool call {item['name']!r}: arguments are not a JSON object"
            found.append((item["name"], args))
        if not found:
            return [], "empty tool call list"
        return found, None

    def format(self, calls: list[tuple[str, dict]]) -> str:
        # Byte-identical to the chat template's rendering (json.dumps defaults, unicode kept).
        return "\n".join(
            f'{CALL_OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '
            f"{json.dumps(args, ensure_ascii=False)}}}\n{CALL_CLOSE}"
            for name, args in calls
        )

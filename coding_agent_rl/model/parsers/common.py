"""What every tool-call parser returns, and the pieces they share."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any, Protocol

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


@dataclasses.dataclass
class ToolParse:
    content: str  # the text that is not a recognised call (ill-formed / unknown calls stay here)
    calls: list[dict[str, Any]]  # canonical tool calls
    errors: list[str]  # one line per ill-formed call


class ToolParser(Protocol):
    name: str

    def parse(self, text: str, tools: list[dict] | None) -> ToolParse: ...

    def format(self, calls: list[tuple[str, dict]]) -> str: ...


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def tool_schemas(tools: list[dict] | None) -> dict[str, dict] | None:
    """name -> parameters schema; None when no tool list was given (then any name is accepted)."""
    if tools is None:
        return None
    out: dict[str, dict] = {}
    for tool in tools:
        fn = tool.get("function", tool)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


def known(name: str, schemas: dict[str, dict] | None) -> bool:
    return schemas is None or name in schemas


_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """Split ``text`` into ``("text", chunk)``, ``("call", block)`` (tags included) and a final
    ``("unclosed", rest)`` when an opening tag has no closing tag."""
    pos = 0
    while True:
        start = text.find(CALL_OPEN, pos)
        if start < 0:
            if pos < len(text):
                yield "text", text[pos:]
            return
        if start > pos:
            yield "text", text[pos:start]
        match = _BLOCK.match(text, start)
        if match is None:
            yield "unclosed", text[start:]
            return
        yield "call", match.group(0)
        pos = match.end()


def inner(block: str) -> str:
    return block[len(CALL_OPEN) : -len(CALL_CLOSE)]


def join_content(pieces: list[str]) -> str:
    return "".join(pieces).strip()

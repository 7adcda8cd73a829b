"""Model output text -> canonical assistant message (reasoning, content, tool calls), and back.

Parser names are SGLang's (``--tool-call-parser`` / ``--reasoning-parser``), so the values users
already pass to slime work here. Parsing never raises on model output: an ill-formed call is
reported in ``errors`` (``ill_formed=True``) and its raw text stays in ``content``; a call to a
tool that is not in ``tools`` is left as text too, but is not ill-formed (``tools=None`` accepts
any name).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coding_agent_rl.model.parsers.common import ToolParser
from coding_agent_rl.model.parsers.json_calls import JsonToolCalls
from coding_agent_rl.model.parsers.reasoning import Qwen3Reasoning
from coding_agent_rl.model.parsers.xml_calls import XmlToolCalls
from coding_agent_rl.settings import default

TOOL_PARSERS: dict[str, ToolParser] = {
    "qwen25": JsonToolCalls("qwen25"),
    "qwen": JsonToolCalls("qwen"),  # SGLang's alias of qwen25
    "hermes": JsonToolCalls("hermes"),
    "qwen3_coder": XmlToolCalls(),
}
REASONING_PARSERS: dict[str, Qwen3Reasoning] = {"qwen3": Qwen3Reasoning()}
# Stop tokens a caller may leave at the end of decoded text; never part of the message.
_TRAILING_SPECIAL = ("<|im_end|>", "<|endoftext|>")


@dataclasses.dataclass
class ParsedAssistant:
    message: dict[str, Any]  # canonical assistant message (see trajectory/turn.py)
    ill_formed: bool
    errors: list[str]


def _lookup(table: dict[str, Any], name: str, kind: str) -> Any:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(sorted(table))}") from None


def get_tool_parser(name: str) -> ToolParser:
    return _lookup(TOOL_PARSERS, name, "tool-call parser")


def get_reasoning_parser(name: str) -> Qwen3Reasoning:
    return _lookup(REASONING_PARSERS, name, "reasoning parser")


def parse_assistant(
    text: str,
    tools: list[dict] | None,
    *,
    tool_parser: str | None = default("tool_parser"),
    reasoning_parser: str | None = default("reasoning_parser"),
    reasoning_started: bool = False,
) -> ParsedAssistant:
    """Split a model's output text into reasoning, content and tool calls.

    ``reasoning_started``: the generation prompt already opened ``<think>``.
    """
    tools_impl = _lookup(TOOL_PARSERS, tool_parser, "tool-call parser") if tool_parser else None
    think_impl = (
        _lookup(REASONING_PARSERS, reasoning_parser, "reasoning parser")
        if reasoning_parser
        else None
    )
    for token in _TRAILING_SPECIAL:
        if text.endswith(token):
            text = text[: -len(token)]
            break
    reasoning, rest = "", text
    if think_impl is not None:
        split = think_impl.split(text, reasoning_started=reasoning_started)
        reasoning, rest = split.reasoning, split.rest
    errors: list[str] = []
    calls: list[dict[str, Any]] = []
    if tools_impl is not None:
        parsed = tools_impl.parse(rest, tools)
        content, calls, errors = parsed.content, parsed.calls, parsed.errors
    else:
        content = rest.strip()
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return ParsedAssistant(message=message, ill_formed=bool(errors), errors=errors)


def format_tool_calls(calls: list[tuple[str, dict]], tool_parser: str) -> str:
    """The text a model using ``tool_parser``'s format emits for ``calls`` (name, arguments)."""
    return _lookup(TOOL_PARSERS, tool_parser, "tool-call parser").format(calls)


__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "ParsedAssistant",
    "format_tool_calls",
    "get_reasoning_parser",
    "get_tool_parser",
    "parse_assistant",
]

"""Qwen3-Coder XML tool calls (SGLang's ``qwen3_coder``)::

    <tool_call>
    <function=f>
    <parameter=k>
    value
    </parameter>
    </function>
    </tool_call>

One leading and one trailing newline of each value are not part of it. Values are text; they are
typed with the tool's JSON schema (integers, numbers, booleans, objects and arrays are parsed;
``null`` is None for any type); a value that does not fit its type stays a string.
"""

from __future__ import annotations

import ast
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

FUNC_OPEN, FUNC_CLOSE = "<function=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"


def schema_type(schema: Any) -> str:
    """The main JSON-schema type of a parameter (first non-null one); "string" when unknown."""
    if not isinstance(schema, dict):
        return "string"
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if isinstance(kind, str):
        return kind
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key) or []:
            found = schema_type(branch)
            if found not in ("string", "null"):
                return found
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def convert(value: str, schema: Any) -> Any:
    if value.lower() == "null":
        return None
    kind = schema_type(schema) if schema is not None else "string"
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            number = float(value)
            exact = "." not in value and "e" not in value.lower()
            return int(number) if exact and number.is_integer() else number
        if kind == "boolean":
            return {"true": True, "false": False}.get(value.strip().lower(), value)
        if kind in ("object", "array"):
            try:
                return json.loads(value)
            except ValueError:
                return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value
    return value


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class XmlToolCalls:
    name = "qwen3_coder"

    def parse(self, text: str, tools: list[dict] | None) -> ToolParse:
        schemas = tool_schemas(tools)
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        errors: list[str] = []
        for kind, chunk in blocks(text):
            if kind == "text":
                content.append(chunk)
                continue
            if kind == "unclosed":
                errors.append(f"{CALL_OPEN} without {CALL_CLOSE}")
                content.append(chunk)
                continue
            try:
                found = self._functions(inner(chunk))
            except ValueError as e:
                errors.append(f"ill-formed XML tool call ({e}): {chunk[:200]!r}")
                content.append(chunk)
                continue
            if not all(known(name, schemas) for name, _ in found):
                content.append(chunk)
                continue
            for name, raw in found:
                props = ((schemas or {}).get(name) or {}).get("properties")
                props = props if isinstance(props, dict) else {}
                args = {k: convert(v, props.get(k)) for k, v in raw.items()}
                calls.append(tool_call(name, args))
        return ToolParse(join_content(content), calls, errors)

    @staticmethod
    def _functions(body: str) -> list[tuple[str, dict[str, str]]]:
        """Scan ``<function=..>`` blocks in order (so a value may contain ``</function>``)."""
        found: list[tuple[str, dict[str, str]]] = []
        pos = 0
        while True:
            pos = len(body) - len(body[pos:].lstrip())
            if pos >= len(body):
                break
            if not body.startswith(FUNC_OPEN, pos):
                raise ValueError(f"expected {FUNC_OPEN}")
            end = body.find(">", pos)
            if end < 0:
                raise ValueError("unterminated function name")
            name = body[pos + len(FUNC_OPEN) : end].strip()
            params: dict[str, str] = {}
            pos = end + 1
            while True:
                pos = len(body) - len(body[pos:].lstrip())
                if body.startswith(FUNC_CLOSE, pos):
                    pos += len(FUNC_CLOSE)
                    break
                if not body.startswith(PARAM_OPEN, pos):
                    raise ValueError(f"function {name!r} has no {FUNC_CLOSE}")
                end = body.find(">", pos)
                close = body.find(PARAM_CLOSE, end) if end >= 0 else -1
                if close < 0:
                    raise ValueError(f"function {name!r}: unclosed {PARAM_OPEN}")
                value = body[end + 1 : close]
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                params[body[pos + len(PARAM_OPEN) : end].strip()] = value
                pos = close + len(PARAM_CLOSE)
            if not name:
                raise ValueError("empty function name")
            found.append((name, params))
        if not found:
            raise ValueError(f"no {FUNC_OPEN}...{FUNC_CLOSE} inside")
        return found

    def format(self, calls: list[tuple[str, dict]]) -> str:
        # Byte-identical to the chat template with tool_call_format="xml".
        out = []
        for name, args in calls:
            params = "".join(
                f"{PARAM_OPEN}{key}>\n{_value_text(value)}\n{PARAM_CLOSE}\n"
                for key, value in args.items()
            )
            out.append(f"{CALL_OPEN}\n{FUNC_OPEN}{name}>\n{params}{FUNC_CLOSE}\n{CALL_CLOSE}")
        return "\n".join(out)

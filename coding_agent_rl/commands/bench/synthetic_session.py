"""A synthetic Claude-Code-sized agent session: instructions, tools, tool calls, tool results.

Deterministic for a seed. Text is built from English and code words so that its tokenization
cost per character resembles a real session's.
"""

from __future__ import annotations

import random
from typing import Any

_WORDS = (
    "the agent must read file before editing it and always run tests after change when user asks "
    "for fix keep diff small prefer existing helpers never commit secrets use absolute paths "
    "search with grep glob tool output may be truncated summarize results explain reasoning "
    "briefly respect repository conventions check imports types errors handle edge cases cache "
    "request response session token stream parser schema config module function class method "
    "value default option argument return raise assert retry timeout budget context window"
)
_IDENTS = "path data items result config parser session request handler buffer index count"
_TOOL_NAMES = (
    "Bash Read Edit MultiEdit Write Glob Grep LS Task TodoWrite WebFetch WebSearch NotebookRead "
    "NotebookEdit ExitPlanMode BashOutput KillShell SlashCommand AskUser ListMcpResources"
)
WORDS = tuple(_WORDS.split())
IDENTS = tuple(_IDENTS.split())
TOOL_NAMES = tuple(_TOOL_NAMES.split())


def sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 18))
    return " ".join(words).capitalize() + rng.choice([".", ".", ".", ":", "!"])


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


def system_prompt(rng: random.Random, tokens: int, count) -> str:
    """Markdown-ish instructions of about ``tokens`` tokens."""
    parts: list[str] = ["You are an interactive CLI coding agent. " + _paragraph(rng, 4)]
    total = count(parts[0])
    while total < tokens:  # counted per part: re-encoding the whole prompt each time is O(n^2)
        section = [f"# {' '.join(rng.choices(WORDS, k=3)).title()}\n{_paragraph(rng, 5)}"]
        section += [f"- {sentence(rng)} `{rng.choice(IDENTS)}`" for _ in range(rng.randint(2, 6))]
        parts += section
        total += count("\n\n".join(section)) + 1
    return "\n\n".join(parts)


def tools(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for name in TOOL_NAMES:
        props: dict[str, dict[str, Any]] = {
            f"{rng.choice(IDENTS)}_{i}": {
                "type": rng.choice(["string", "integer", "boolean"]),
                "description": sentence(rng),
            }
            for i in range(rng.randint(1, 5))
        }
        props["paths"] = {"type": "array", "items": {"type": "string"}, "description": "files"}
        fn = {
            "name": name,
            "description": _paragraph(rng, rng.randint(3, 25)),
            "parameters": {"type": "object", "properties": props, "required": [next(iter(props))]},
        }
        out.append({"type": "function", "function": fn})
    return out


def source_file(rng: random.Random, lines: int) -> str:
    """A fake source listing in Claude Code's Read format (line numbers, tabs)."""
    body = []
    for n in range(1, lines + 1):
        indent = "    " * rng.randint(0, 3)
        a, b = rng.choice(IDENTS), rng.choice(IDENTS)
        line = rng.choice(
            [
                f"def {a}_{b}({a}, {b}={n}):",
                f"{a} = {b}.get('{rng.choice(WORDS)}', {rng.randint(0, 999)})",
                f"if {a} is None or len({b}) > {rng.randint(1, 64)}:",
                f"return [{a} for {a} in {b} if {a}]",
                f"# {sentence(rng)}",
            ]
        )
        body.append(f"{n:6d}\t{indent}{line}")
    return "\n".join(body)


def assistant_turn(rng: random.Random, step: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    calls, results = [], []
    for _ in range(rng.choice([1, 1, 2, 3])):
        name = rng.choice(["Read", "Bash", "Grep", "Edit"])
        args = {"file_path": f"/repo/src/{rng.choice(IDENTS)}_{step}.py"}
        if name == "Bash":
            args = {"command": f"python -m pytest -q tests/test_{rng.choice(IDENTS)}.py"}
        calls.append({"type": "function", "function": {"name": name, "arguments": args}})
        results.append(
            {"role": "tool", "name": name, "content": source_file(rng, rng.randint(5, 60))}
        )
    message: dict[str, Any] = {"role": "assistant", "content": sentence(rng), "tool_calls": calls}
    if rng.random() < 0.5:
        message["reasoning_content"] = _paragraph(rng, rng.randint(1, 4))
    return message, results

"""The policy contract behind the CPU ``/generate`` server, and the base of text-scripted ones.

A policy turns one SGLang ``/generate`` request (prompt token ids + sampling params) into
output token ids with logprobs and a finish reason, exactly the fields SGLang returns.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import functools
import json
import re
from typing import Any

from coding_agent_rl.model.parsers import format_tool_calls
from coding_agent_rl.settings import default

IM_END = "<|im_end|>"
_TOOLS_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)  # not the "<tools></tools>" mention


@dataclasses.dataclass
class PolicyEnv:
    """What every policy may use: the tokenizer and the tool-call format to emit."""

    tokenizer: Any
    tool_parser: str = default("tool_parser")

    @functools.cached_property
    def end_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(IM_END))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return format_tool_calls([(name, arguments)], self.tool_parser)


@dataclasses.dataclass
class GenerateRequest:
    rid: str
    session: str  # the X-SMG-Routing-Key header ("" when absent)
    input_ids: list[int]
    sampling: dict[str, Any]
    aborted: asyncio.Event | Any = dataclasses.field(default_factory=asyncio.Event)
    image_data: list[str] = dataclasses.field(default_factory=list)  # as the request sent them
    image_inputs: dict[str, Any] | None = None  # the server's processor tensors for them


@dataclasses.dataclass
class Completion:
    output_ids: list[int]
    logprobs: list[float]
    finish: dict[str, Any]  # SGLang's finish_reason object


class Prompt:
    """The decoded prompt, with the pieces scripted policies look at."""

    def __init__(self, text: str):
        self.text = text

    @functools.cached_property
    def tools(self) -> list[dict[str, Any]]:
        """Function specs (``{"name", "parameters", ...}``) listed in the system turn."""
        match = _TOOLS_BLOCK.search(self.text)
        if not match:
            return []
        out = []
        for line in match.group(1).splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                spec = json.loads(line)
            except ValueError:
                continue
            spec = spec.get("function", spec) if isinstance(spec, dict) else None
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                out.append(spec)
        if not out:  # XML-style listings (Qwen3-Coder): <function><name>X</name>...
            out = [
                {"name": n, "parameters": {}}
                for n in re.findall(r"<name>(.*?)</name>", match.group(1))
            ]
        return out

    @functools.cached_property
    def last_message(self) -> str:
        """The text of the last turn before the generation prompt, without its role line."""
        turns = self.text.split("<|im_start|>")
        body = turns[-1]
        if len(turns) >= 2 and body.startswith("assistant"):
            body = turns[-2]
        return body.split(IM_END, 1)[0].partition("\n")[2]


class Policy(abc.ABC):
    """A policy; ``register`` receives ``POST /policy/sessions/{sid}`` bodies (optional)."""

    name = "policy"

    @abc.abstractmethod
    async def generate(self, request: GenerateRequest, env: PolicyEnv) -> Completion: ...

    def register(self, sid: str, **data: Any) -> None:
        raise ValueError(f"policy {self.name!r} takes no per-session data")


def pseudo_logprob(token_id: int, position: int) -> float:
    """A deterministic stand-in logprob in (-1, 0]: scripted text has no real distribution."""
    return -(((token_id * 2654435761 + position * 40503) % 1000) / 1000.0)


class TextPolicy(Policy):
    """A policy that decides the whole reply *text*; tokens are the tokenizer's encoding of it."""

    @abc.abstractmethod
    def reply_text(self, request: GenerateRequest, prompt: Prompt, env: PolicyEnv) -> str:
        """The assistant text without the end token."""

    async def generate(self, request: GenerateRequest, env: PolicyEnv) -> Completion:
        prompt = Prompt(env.tokenizer.decode(request.input_ids, skip_special_tokens=False))
        ids = [*env.encode(self.reply_text(request, prompt, env)), env.end_id]
        stop_ids = set(request.sampling.get("stop_token_ids") or []) | {env.end_id}
        cut = next((i for i, t in enumerate(ids) if t in stop_ids), len(ids) - 1)
        ids = ids[: cut + 1]
        finish: dict[str, Any] = {"type": "stop", "matched": ids[-1]}
        limit = request.sampling.get("max_new_tokens")
        if limit is not None and len(ids) > int(limit):
            ids = ids[: max(0, int(limit))]
            finish = {"type": "length", "length": len(ids)}
        return Completion(ids, [pseudo_logprob(t, i) for i, t in enumerate(ids)], finish)

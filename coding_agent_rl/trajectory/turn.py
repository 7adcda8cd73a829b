"""One recorded model call: what the adapter sent to SGLang and what it sampled.

Messages are *canonical*: the OpenAI-chat-like dicts chat templates consume, whatever wire
format the agent spoke, with wire ids dropped so that equality means "the same conversation":

* ``{"role": "system", "content": str}``
* ``{"role": "user", "content": str}``
* ``{"role": "assistant", "content": str, "reasoning_content": str (optional),
  "tool_calls": [{"type": "function", "function": {"name": str, "arguments": dict}}]}``
* ``{"role": "tool", "name": str (optional), "content": str}``

Tools are ``{"type": "function", "function": {"name", "description", "parameters"}}``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any


@dataclasses.dataclass
class Turn:
    session_id: str
    index: int  # position in the session's recording order
    messages: list[dict[str, Any]]  # canonical prompt messages
    tools: list[dict[str, Any]]
    prompt_ids: list[int]  # exactly what was sent to SGLang
    output_ids: list[int]  # exactly what SGLang sampled (keeps the stop token)
    output_logprobs: list[float]  # one per output id
    finish_reason: str  # "stop" | "length" | "abort"
    assistant: dict[str, Any]  # the parsed canonical assistant message
    ill_formed: bool = False  # a tool call could not be parsed
    parent: int | None = None  # index of the turn whose prompt+output this prompt extends
    wire: str = ""  # "anthropic" | "chat" | "responses"
    created_at: float = dataclasses.field(default_factory=time.time)
    latency_s: float = 0.0
    weight_version: str | None = None  # SGLang's meta_info.weight_version for this turn

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

"""One recorded model call: what the adapter sent to SGLang and what it sampled.

Messages are canonical (OpenAI-chat-like dicts, wire ids dropped) so that equality means "the
same conversation". Their shapes: docs/modules/trajectory.md.
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
    # Every image in prompt_ids, in order (multimodal.ImageItem: the image, its processor tensors,
    # its token count; items of earlier turns shared, not copied) and where each image's token
    # run ends in prompt_ids. Sent as SGLang's image_data; a sample takes the ones it holds.
    images: list[Any] = dataclasses.field(default_factory=list)
    image_ends: list[int] = dataclasses.field(default_factory=list)
    # A branch's replayed turn (adapter/replay.py): which recorded turn answered it and whether
    # the prompt diverged from that turn's; its output is the recorded one, never trained here.
    replay: dict[str, Any] | None = None
    matched_stop: str | None = None  # the stop string that ended the output (SGLang's), if any

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (images as their count: their tensors go to the samples)."""
        images, self.images = self.images, []
        try:
            d = dataclasses.asdict(self)
        finally:
            self.images = images
        d["images"] = len(images)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        names = {f.name for f in dataclasses.fields(cls)} - {"images"}
        return cls(**{k: v for k, v in data.items() if k in names})

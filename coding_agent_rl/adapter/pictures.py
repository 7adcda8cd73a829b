"""Picture blocks of the three wire formats -> canonical content, and what the turn engine does
with them (resolution, bounds, the VLM's token expansion).

:func:`content` keeps the client's picture parts as sent among text parts;
:class:`ImagePath` expands the pictures a request adds to the VLM processor's token count (or
the text-only placeholder). A bad or excess picture is text the model reads; a refused one is a
400. Details: docs/modules/adapter.md.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from coding_agent_rl.adapter.errors import BadRequest
from coding_agent_rl.multimodal.parts import (
    ImageSettings,
    ImagesRefused,
    decode_part,
    image_identity,
    is_image_part,
    render_with_images,
)
from coding_agent_rl.multimodal.pictures import ImageLimits, ImageRef

__all__ = ["ImagePath", "append_text", "content", "is_image_part", "prefix_text"]
from coding_agent_rl.multimodal.processor import ImageItem, VisionProcessor

CACHE_SIZE = 256  # decoded images kept (a CLI re-sends its whole history every request)


def content(items: list[Any]) -> str | list[dict[str, Any]]:
    """Texts (joined with newlines) or, with an image among ``items``, the parts."""
    if not any(is_image_part(i) for i in items):
        return "\n".join(i for i in items if isinstance(i, str) and i)
    parts: list[dict[str, Any]] = []
    for item in items:
        if is_image_part(item):
            parts.append(item)
        elif isinstance(item, str) and item:
            parts.append({"type": "text", "text": item})
    return parts


def prefix_text(value: str | list[dict[str, Any]], prefix: str) -> str | list[dict[str, Any]]:
    """``prefix`` before the content (a tool error's ``Error: ``)."""
    if isinstance(value, str):
        return prefix + value
    return [{"type": "text", "text": prefix.rstrip()}, *value]


def append_text(value: str | list[dict[str, Any]], text: str) -> str | list[dict[str, Any]]:
    """``text`` after the content, on its own line (a folded system reminder)."""
    if isinstance(value, str):
        return "\n".join(t for t in (value, text) if t)
    return [*value, {"type": "text", "text": text}]


class ImagePath:
    """Images of one adapter: settings, the VLM processor (None: text-only), a decode cache."""

    def __init__(self, settings: ImageSettings, vision: VisionProcessor | None):
        self.settings = settings
        self.vision = vision
        self._cache: collections.OrderedDict[str, ImageRef] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _decode(self, part: dict[str, Any], limits: ImageLimits, where: str) -> ImageRef:
        key = image_identity(part)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        ref = decode_part(part, limits, where)  # ImageError propagates: shown as text
        with self._lock:
            self._cache[key] = ref
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return ref

    def render(
        self,
        messages: list[dict[str, Any]],
        used: int,
        full: bool,
        render: Callable[[list[dict[str, Any]]], list[int]],
    ) -> tuple[list[int], list[ImageItem]]:
        """Tokens for ``messages`` (``render`` applies the template to the prepared messages)
        and their new images; ``used``: images already in the stored tokens."""
        try:
            return render_with_images(
                messages,
                self.settings,
                self.vision,
                render,
                used=used,
                full=full,
                decode=self._decode,
            )
        except ImagesRefused as e:
            raise BadRequest(str(e)) from e

    def refuse_sampled_vision_tokens(self, output_ids: list[int]) -> None:
        """A VLM policy that sampled a vision special token cannot be continued (no engine
        takes a stray image token back as input): 400, the model's outcome, not infra."""
        if self.vision is None:
            return
        v = self.vision
        hit = next((t for t in output_ids if t in (v.pad_id, v.start_id, v.end_id)), None)
        if hit is not None:
            raise BadRequest(
                f"the policy sampled an image token (id {hit}) in its previous turn: "
                "this conversation cannot be continued"
            )

    def ends(self, ids: list[int]) -> list[int]:
        """Where each image's token run ends in ``ids`` (exclusive), for trimming samples."""
        if self.vision is None:
            return []
        return [end for _, end in self.vision.spans(ids)]

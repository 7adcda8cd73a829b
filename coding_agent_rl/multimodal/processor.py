"""A VLM's image processor on our token path: per-picture token counts, placeholder expansion.

:meth:`VisionProcessor.expand` repeats ``<|image_pad|>`` once per image token of each picture
just rendered (the processor's count, which SGLang checks); :func:`defuse` neutralises vision
markers that appear as text. Details: docs/modules/multimodal.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from coding_agent_rl.multimodal.pictures import ImageRef

VISION_START, VISION_END, IMAGE_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, "<|vision_pad|>", "<|video_pad|>")
WORD_JOINER = "\u2060"  # invisible; breaks the special-token match without changing the look


def defuse(text: str) -> str:
    """``text`` with every vision special-token string broken up (``<`` + word joiner + rest):
    text the policy controls can never become image tokens without an image."""
    if "<|" not in text:
        return text
    for token in VISION_TOKENS:
        if token in text:
            text = text.replace(token, token[0] + WORD_JOINER + token[1:])
    return text


def has_image_processor(path: str | pathlib.Path | None) -> bool:
    """Whether ``path`` is a checkpoint directory with an image processor (a VLM's)."""
    return bool(path) and (pathlib.Path(str(path)) / "preprocessor_config.json").is_file()


@dataclasses.dataclass
class ImageItem:
    """One image in a prompt: the decoded image, its processor tensors, its token count."""

    ref: ImageRef
    train: dict[str, Any]  # this image's rows of pixel_values, image_grid_thw, ...
    tokens: int


class VisionProcessor:
    """An image processor plus the tokenizer's vision token ids."""

    def __init__(self, image_processor: Any, tokenizer: Any):
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, VISION_END, IMAGE_PAD)}
        if any(not isinstance(i, int) or i == tokenizer.unk_token_id for i in ids.values()):
            raise ValueError("the tokenizer has no Qwen-VL vision tokens (<|image_pad|>, ...)")
        self.start_id, self.end_id, self.pad_id = (
            ids[VISION_START],
            ids[VISION_END],
            ids[IMAGE_PAD],
        )
        self.merge_size = int(getattr(image_processor, "merge_size", 2) or 2)

    @classmethod
    def load(cls, path: str | pathlib.Path, tokenizer: Any = None) -> VisionProcessor:
        """From a checkpoint (or processor) directory holding ``preprocessor_config.json``."""
        from transformers import AutoImageProcessor

        path = pathlib.Path(path)
        if not (path / "preprocessor_config.json").is_file():
            raise ValueError(f"{path}: no preprocessor_config.json (not a vision checkpoint)")
        if tokenizer is None:
            from coding_agent_rl.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(str(path))
        return cls(AutoImageProcessor.from_pretrained(str(path)), tokenizer)

    def check(self, ref: ImageRef) -> None:
        """Raise :class:`ImageError` for an image this processor cannot take (its resize rule)."""
        from coding_agent_rl.multimodal.pictures import ImageError

        count = getattr(self.image_processor, "get_number_of_image_patches", None)
        if count is None:
            return
        try:
            count(ref.height, ref.width, {})
        except Exception as e:  # the processor's own refusal (e.g. an extreme aspect ratio)
            raise ImageError(f"image: the image processor refuses it ({e})") from e

    def process(self, images: list[ImageRef]) -> list[ImageItem]:
        """One processor call for ``images``; the result split per image (row views, no copy)."""
        if not images:
            return []
        out = self.image_processor(images=[im.pixels for im in images], return_tensors="pt")
        grid = out["image_grid_thw"]
        items, row = [], 0
        for n, ref in enumerate(images):
            rows = int(grid[n].prod())
            train = {
                "pixel_values": out["pixel_values"][row : row + rows],
                "image_grid_thw": grid[n : n + 1],
            }
            row += rows
            items.append(ImageItem(ref, train, rows // self.merge_size**2))
        return items

    def process_bytes(self, images: list[bytes]) -> list[ImageItem]:
        """:meth:`process` for encoded images (PNG/JPEG/... bytes), with default limits."""
        from coding_agent_rl.multimodal.pictures import ImageLimits, load_image

        return self.process([load_image(raw, ImageLimits()) for raw in images])

    def expand(self, ids: list[int], items: list[ImageItem]) -> list[int]:
        """``ids`` (rendered with one ``<|image_pad|>`` per image) with each pad repeated to the
        image's token count. ``ValueError`` when the pads and the images do not pair up."""
        pads = [i for i, t in enumerate(ids) if t == self.pad_id]
        if len(pads) != len(items):
            raise ValueError(
                f"{len(pads)} image placeholders rendered for {len(items)} images "
                "(the chat template must render each image part once)"
            )
        if not pads:
            return ids
        out: list[int] = []
        prev = 0
        for at, item in zip(pads, items, strict=True):
            out.extend(ids[prev:at])
            out.extend([self.pad_id] * item.tokens)
            prev = at + 1
        out.extend(ids[prev:])
        return out

    def spans(self, ids: list[int]) -> list[tuple[int, int]]:
        """``(start, end)`` of each image-token run ``<|vision_start|><|image_pad|>+<|vision_end|>``
        in ``ids`` (the pads are ``ids[start:end]``); ``ValueError`` for a stray pad."""
        spans: list[tuple[int, int]] = []
        i, n = 0, len(ids)
        while i < n:
            if ids[i] == self.pad_id:
                raise ValueError(f"image token at {i} outside a vision_start/vision_end pair")
            if ids[i] == self.start_id and i + 1 < n and ids[i + 1] == self.pad_id:
                j = i + 1
                while j < n and ids[j] == self.pad_id:
                    j += 1
                if j >= n or ids[j] != self.end_id:
                    raise ValueError(f"image token run at {i + 1} is not closed by vision_end")
                spans.append((i + 1, j))
                i = j + 1
                continue
            i += 1
        return spans

    def runs(self, ids: list[int]) -> list[int]:
        """Lengths of the image-token runs in ``ids`` (what SGLang pairs with ``image_data``)."""
        return [end - start for start, end in self.spans(ids)]

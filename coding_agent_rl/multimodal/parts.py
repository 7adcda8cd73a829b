"""Picture parts of chat messages, made ready for a chat template.

:func:`prepare` accepts slime's, OpenAI's, Responses' and Anthropic's picture parts and turns
each into the template's placeholder plus an :class:`~.pictures.ImageRef` (a VLM), a placeholder
text or a refusal (a text-only policy), or ``[image not shown: <why>]``; never silently dropped.
Details: docs/modules/multimodal.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from coding_agent_rl.errors import TaskDataError
from coding_agent_rl.multimodal.pictures import (
    ImageError,
    ImageGate,
    ImageLimits,
    ImageRef,
    from_base64,
    from_data_url,
    load_image,
)
from coding_agent_rl.multimodal.processor import defuse

IMAGE_TYPES = ("image", "image_url", "input_image")
TEXT_ONLY = ("placeholder", "refuse")
DEFAULT_PLACEHOLDER = "[image: {desc} - not shown, this model reads text only]"
NOT_SHOWN = "[image not shown: {reason}]"


class ImagesRefused(TaskDataError):
    """Images reached a text-only policy whose setting is ``text_only="refuse"``."""


@dataclasses.dataclass(frozen=True)
class ImageSettings:
    """How images reach the policy (one object per adapter / native encoder)."""

    limits: ImageLimits = dataclasses.field(default_factory=ImageLimits)
    text_only: str = "placeholder"
    """For a policy without an image processor: ``placeholder`` or ``refuse``."""
    placeholder: str = DEFAULT_PLACEHOLDER
    """Text put where an image was for a text-only policy; ``{desc}``: type, size, bytes."""

    def __post_init__(self) -> None:
        if self.text_only not in TEXT_ONLY:
            raise ValueError(f"text_only must be one of {', '.join(TEXT_ONLY)}")


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in IMAGE_TYPES


def decode_part(part: dict[str, Any], limits: ImageLimits, where: str) -> ImageRef:
    """The image of one part (``ImageError`` when it cannot be shown)."""
    if isinstance(part.get("image"), ImageRef):
        return part["image"]
    source = part.get("source")
    if isinstance(source, dict):  # Anthropic
        if source.get("type") == "base64":
            return from_base64(source.get("data"), limits, where)
        if source.get("type") == "url":
            return from_data_url(source.get("url"), limits, where)
        raise ImageError(f"{where}: unsupported image source type {source.get('type')!r}")
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if url is not None:
        return from_data_url(url, limits, where)
    if part.get("image") is not None:
        return load_image(part["image"], limits, where)
    raise ImageError(f"{where}: the image part has no image")


Decoder = Callable[[dict[str, Any], ImageLimits, str], ImageRef]


def prepare(
    messages: list[dict[str, Any]],
    settings: ImageSettings,
    gate: ImageGate,
    *,
    vision: bool,
    decode: Decoder = decode_part,
    check: Callable[[ImageRef], None] | None = None,
) -> tuple[list[dict[str, Any]], list[ImageRef]]:
    """Messages for the chat template and the images they show, in order (see module doc).
    ``check``: the VLM processor's own test of an image (raises :class:`ImageError`)."""
    out: list[dict[str, Any]] = []
    images: list[ImageRef] = []
    for m in messages:
        if vision and m.get("role") == "assistant":  # a re-rendered history: its calls too
            m = _defused_assistant(m)
        content = m.get("content")
        if isinstance(content, str):
            out.append({**m, "content": defuse(content)} if vision else m)
            continue
        if not isinstance(content, list):
            out.append(m)
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            if not is_image_part(part):
                if isinstance(part, dict) and isinstance(part.get("text"), str) and vision:
                    part = {**part, "text": defuse(part["text"])}
                parts.append(part if isinstance(part, dict) else {"type": "text", "text": part})
                continue
            item: ImageRef | ImageError
            try:
                ref = decode(part, settings.limits, "image")
                if vision and check is not None:
                    check(ref)
                item = ref
            except ImageError as e:
                item = e
            item = gate.admit(item)
            if isinstance(item, ImageError):
                parts.append({"type": "text", "text": NOT_SHOWN.format(reason=item)})
            elif vision:
                parts.append({"type": "image"})
                images.append(item)
            elif settings.text_only == "refuse":
                raise ImagesRefused(
                    f"an image ({item.describe()}) reached a text-only policy "
                    "(image setting text_only=refuse)"
                )
            else:
                parts.append(
                    {"type": "text", "text": settings.placeholder.format(desc=item.describe())}
                )
        if vision:
            out.append({**m, "content": parts})
        else:
            texts = [str(p.get("text") or "") for p in parts]
            out.append({**m, "content": "\n".join(t for t in texts if t)})
    return out, images


def _defused(value: Any) -> Any:
    if isinstance(value, str):
        return defuse(value)
    if isinstance(value, dict):
        return {k: _defused(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_defused(v) for v in value]
    return value


def _defused_assistant(m: dict[str, Any]) -> dict[str, Any]:
    """An assistant message with the vision markers in its reasoning and tool-call arguments
    defused (the text is the policy's: a full render must not turn it into image tokens)."""
    out = dict(m)
    if isinstance(out.get("reasoning_content"), str):
        out["reasoning_content"] = defuse(out["reasoning_content"])
    if out.get("tool_calls"):
        out["tool_calls"] = _defused(out["tool_calls"])
    return out


def image_identity(part: dict[str, Any]) -> str:
    """A short identity of an image part's payload (equal for the same image sent again)."""
    import hashlib
    import json

    ref = part.get("image")
    if isinstance(ref, ImageRef):
        return ref.sha256[:32]
    payload = {k: v for k, v in part.items() if k not in ("type", "cache_control")}
    raw = json.dumps(payload, sort_keys=True, default=repr).encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def content_key(content: Any) -> Any:
    """Message content for identity: the stripped text, or, when it shows images, the list of
    its text pieces and image identities in order."""
    if not isinstance(content, list):
        return (content or "").strip() if isinstance(content, str) else content
    if not any(is_image_part(p) for p in content):
        texts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "\n".join(t for t in texts if t).strip()
    out: list[str] = []
    for p in content:
        if is_image_part(p):
            out.append("image:" + image_identity(p))
        elif isinstance(p, dict) and isinstance(p.get("text"), str):
            out.append(p["text"].strip())
        elif isinstance(p, str):
            out.append(p.strip())
    return out


def render_with_images(
    messages: list[dict[str, Any]],
    settings: ImageSettings,
    vision: Any,
    render: Callable[[list[dict[str, Any]]], list[int]],
    *,
    used: int = 0,
    full: bool = False,
    decode: Decoder = decode_part,
) -> tuple[list[int], list[Any]]:
    """Token ids of ``messages`` and the images they add, in order (``vision``: a
    ``VisionProcessor`` or None for a text-only policy; ``render``: the chat template on the
    prepared messages, a full render or a delta). Each image's placeholder is expanded to its
    token count; ``used`` images are already in the stored tokens (the per-sample bound counts
    them); ``full``: a whole conversation (the per-turn bound does not apply). Raises
    :class:`ImagesRefused` (text-only policy, ``refuse``) and ``ValueError`` when the rendered
    placeholders do not pair up with the images (a template that drops image parts)."""
    limits = settings.limits
    gate = ImageGate(limits, used, per_turn=limits.max_per_sample if full else None)
    check = getattr(vision, "check", None)
    prepared, refs = prepare(
        messages, settings, gate, vision=vision is not None, decode=decode, check=check
    )
    ids = render(prepared)
    if vision is None:
        return ids, []
    items = vision.process(refs)
    return vision.expand(ids, items), items

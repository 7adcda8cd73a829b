"""Pictures as the policy may see them: decoded, bounded, and counted per turn and per sample.

:func:`load_image` takes inline data only and bounds bytes, pixels (from the header, before
decoding) and aspect ratio; :class:`ImageGate` bounds pictures per turn and per sample. Whatever
is wrong is an :class:`ImageError`: the model's problem, answered as text. Details:
docs/modules/multimodal.md.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import io
import os
import pathlib
import warnings
from typing import Any

from coding_agent_rl.errors import TaskDataError

MIB = 1024 * 1024
MAX_ASPECT = 200  # Qwen-VL's smart_resize refuses a longer side over 200x the shorter one
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


class ImageError(TaskDataError):
    """An image that cannot be shown to the policy; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class ImageLimits:
    """Bounds on the images of one rollout (defaults suit a coding agent's screenshots/plots)."""

    max_bytes: int = 5 * MIB
    """Encoded size of one image (Anthropic's API refuses more than 5 MB per image)."""
    max_pixels: int = 4096 * 4096
    """Decoded pixel count of one image, checked from the header before decoding."""
    max_per_turn: int = 8
    """Images one request / observation may add; the rest are answered as text."""
    max_per_sample: int = 8
    """Images one sample (one token sequence) may hold in all. CLIs re-send every image of the
    conversation with each request, so this (times ``max_bytes``) also sizes the adapter's request
    body limit (adapter/handler.py ``image_allowance``): 8 x 5 MiB adds ~53 MiB."""

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_pixels", "max_per_turn", "max_per_sample"):
            if getattr(self, name) < 1:
                raise ValueError(f"image limit {name} must be >= 1")


@dataclasses.dataclass(frozen=True, eq=False)
class ImageRef:
    """One decoded image: its encoded bytes, format and size, and the RGB pixels."""

    data: bytes
    mime: str
    width: int
    height: int
    sha256: str
    pixels: Any = dataclasses.field(repr=False)  # PIL.Image.Image, RGB, loaded

    @functools.cached_property
    def data_url(self) -> str:
        """What SGLang's ``image_data`` takes (and what ``multimodal_inputs`` keeps)."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"

    def describe(self) -> str:
        return f"{self.mime} {self.width}x{self.height}, {len(self.data) / 1024:.1f} KB"


def _decode(raw: bytes, limits: ImageLimits, where: str) -> ImageRef:
    from PIL import Image, UnidentifiedImageError

    if len(raw) > limits.max_bytes:
        raise ImageError(f"{where}: {len(raw)} bytes, over the limit of {limits.max_bytes}")
    if not raw:
        raise ImageError(f"{where}: empty image data")
    try:
        with warnings.catch_warnings():  # our own pixel bound (below PIL's) applies instead
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(raw))  # reads the header only
        width, height = image.size
        fmt = image.format or ""
    except Image.DecompressionBombError as e:  # PIL's own header check, far over ours
        raise ImageError(
            f"{where}: declares more pixels than the limit of {limits.max_pixels} ({e})"
        ) from e
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise ImageError(f"{where}: not a decodable image ({type(e).__name__})") from e
    if fmt not in FORMATS:
        raise ImageError(f"{where}: unsupported image format {fmt or 'unknown'!r}")
    if width < 1 or height < 1:
        raise ImageError(f"{where}: empty image ({width}x{height})")
    if width * height > limits.max_pixels:
        raise ImageError(
            f"{where}: {width}x{height} pixels, over the limit of {limits.max_pixels} pixels"
        )
    if max(width, height) > MAX_ASPECT * min(width, height):
        raise ImageError(f"{where}: aspect ratio {width}x{height} is over {MAX_ASPECT}:1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
            pixels = image.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ImageError(f"{where}: the image data is corrupt ({type(e).__name__})") from e
    digest = hashlib.sha256(raw).hexdigest()
    return ImageRef(raw, FORMATS[fmt], width, height, digest, pixels)


def from_base64(text: Any, limits: ImageLimits, where: str = "image") -> ImageRef:
    """An image from base64 text (Anthropic's ``source.data``)."""
    if not isinstance(text, str):
        raise ImageError(f"{where}: base64 data must be a string")
    # The encoded form is 4/3 of the bytes: refuse an oversized payload before decoding it.
    if len(text) > limits.max_bytes * 4 // 3 + 8:
        raise ImageError(f"{where}: over the limit of {limits.max_bytes} bytes")
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageError(f"{where}: invalid base64 data") from e
    return _decode(raw, limits, where)


def from_data_url(url: Any, limits: ImageLimits, where: str = "image") -> ImageRef:
    """An image from a ``data:<mime>;base64,<data>`` URL; any other URL is refused."""
    if not isinstance(url, str) or not url:
        raise ImageError(f"{where}: the image URL must be a non-empty string")
    if not url.startswith("data:"):
        shown = url[:60] + ("..." if len(url) > 60 else "")
        raise ImageError(f"{where}: only inline data: URLs are accepted, not {shown!r}")
    head, sep, body = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ImageError(f"{where}: a data: URL must be base64 encoded")
    return from_base64(body, limits, where)


def load_image(source: Any, limits: ImageLimits, where: str = "image") -> ImageRef:
    """An image from what an environment or client hands over: an :class:`ImageRef`, a PIL
    image, bytes, a :class:`pathlib.Path` (or a path string to an existing file), a ``data:``
    URL or base64 text, or a dict with one of ``bytes`` / ``path`` / ``url`` / ``data``."""
    if isinstance(source, ImageRef):
        return source
    if isinstance(source, dict):
        for key in ("bytes", "path", "url", "data", "image"):
            if source.get(key) is not None:
                return load_image(source[key], limits, where)
        raise ImageError(f"{where}: an image dict needs bytes, path, url or data")
    if isinstance(source, (bytes, bytearray)):
        return _decode(bytes(source), limits, where)
    if isinstance(source, pathlib.Path) or (
        isinstance(source, str) and not source.startswith("data:") and _is_file(source)
    ):
        path = pathlib.Path(source)
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise ImageError(f"{where}: {path} is {size} bytes, over {limits.max_bytes}")
        return _decode(path.read_bytes(), limits, where)
    if isinstance(source, str):
        if source.startswith("data:") or "://" in source[:16]:
            return from_data_url(source, limits, where)
        return from_base64(source, limits, where)
    if hasattr(source, "save") and hasattr(source, "size"):  # a PIL image
        buf = io.BytesIO()
        source.save(buf, format="PNG")
        return _decode(buf.getvalue(), limits, where)
    raise ImageError(f"{where}: unsupported image value of type {type(source).__name__}")


def _is_file(text: str) -> bool:
    return len(text) < 4096 and "\n" not in text and os.path.isfile(text)


class ImageGate:
    """Counts the images of one sample. :meth:`admit` passes an image while the turn holds fewer
    than ``per_turn`` (default ``limits.max_per_turn``) and the sample fewer than
    ``limits.max_per_sample``; past a limit the image comes back as an :class:`ImageError`."""

    def __init__(self, limits: ImageLimits, used: int = 0, per_turn: int | None = None):
        self.limits = limits
        self.used = used
        self.per_turn = per_turn or limits.max_per_turn
        self.turn = 0
        self.seen = 0

    def admit(self, item: ImageRef | ImageError) -> ImageRef | ImageError:
        self.seen += 1
        if isinstance(item, ImageError):
            return item
        if self.turn >= self.per_turn:
            return ImageError(f"image {self.seen}: at most {self.per_turn} images per turn")
        if self.used >= self.limits.max_per_sample:
            return ImageError(
                f"image {self.seen}: at most {self.limits.max_per_sample} images per sample"
            )
        self.turn += 1
        self.used += 1
        return item

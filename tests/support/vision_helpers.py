"""Small real images for the multimodal tests (PNG bytes made with Pillow)."""

from __future__ import annotations

import base64
import io


def png(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A real PNG: a solid ``color`` with a darker first column (so images differ by size too)."""
    from PIL import Image

    image = Image.new("RGB", (width, height), color)
    for y in range(height):
        image.putpixel((0, y), tuple(c // 2 for c in color))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def noise(width: int, height: int, seed: int = 0) -> bytes:
    """A PNG of random pixels (does not compress: its size is about 3 bytes per pixel)."""
    import random

    from PIL import Image

    rng = random.Random(seed)
    image = Image.frombytes(
        "RGB", (width, height), bytes(rng.randrange(256) for _ in range(width * height * 3))
    )
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()

"""The image bounds and helpers on their own: decoding limits checked before pixels are decoded
(a decompression bomb is refused from its header), counts per turn and per sample, text defusing,
image identity for turn matching, and the samples file keeping tensors exactly."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest
import torch
from support.vision_helpers import data_url, png

from coding_agent_rl.multimodal.parts import content_key
from coding_agent_rl.multimodal.pictures import (
    ImageError,
    ImageGate,
    ImageLimits,
    from_base64,
    load_image,
)
from coding_agent_rl.multimodal.processor import defuse
from coding_agent_rl.types import Sample


def bomb(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares ``width x height`` grey pixels (zlib of zero rows)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = zlib.compress(b"\0" * (width + 1) * 64, 9)  # only 64 rows of data: the rest is claimed
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    "side, why",
    [
        (5000, "5000x5000 pixels, over the limit of 16777216"),  # ours, from the header
        (30000, "declares more pixels than the limit of 16777216"),  # PIL's own header check
    ],
)
def test_decompression_bomb_is_refused_from_its_header(side, why, monkeypatch):
    """A PNG the policy can write in a few KB that would take ``side**2`` pixels of memory:
    refused from its header, as an ImageError (the model's problem), never a crash."""
    from PIL import ImageFile

    raw = bomb(side, side)
    assert len(raw) < 100_000
    decoded: list[object] = []
    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda im: decoded.append(im) or real_load(im))
    with pytest.raises(ImageError, match=why):
        load_image(raw, ImageLimits())
    assert decoded == []  # refused before a single pixel was decoded
    load_image(png(8, 8), ImageLimits())
    assert decoded  # the check sees a real decode


def test_bounds_and_formats():
    limits = ImageLimits(max_bytes=10_000)
    ok = load_image(png(56, 28), limits)
    assert (ok.mime, ok.width, ok.height) == ("image/png", 56, 28)
    assert ok.data_url == data_url(png(56, 28))
    with pytest.raises(ImageError, match="aspect ratio"):
        load_image(png(402, 2), limits)
    with pytest.raises(ImageError, match="over the limit of 10000 bytes"):
        from_base64("A" * 20_000, limits)  # refused before decoding the base64
    with pytest.raises(ImageError, match="only inline data: URLs"):
        load_image({"url": "http://10.0.0.1/x.png"}, limits)
    with pytest.raises(ImageError, match="unsupported image format 'BMP'"):
        import io

        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (4, 4)).save(buf, format="BMP")
        load_image(buf.getvalue(), limits)
    with pytest.raises(ImageError, match="invalid base64"):
        from_base64("not base64!", limits)


def test_gate_counts_per_turn_then_per_sample():
    ref = load_image(png(28, 28), ImageLimits())
    gate = ImageGate(ImageLimits(max_per_turn=2, max_per_sample=3), used=1)
    got = [gate.admit(ref) for _ in range(3)]
    assert got[:2] == [ref, ref] and "per turn" in str(got[2])
    gate = ImageGate(gate.limits, used=gate.used)  # the next turn
    assert "per sample" in str(gate.admit(ref))


def test_defuse_breaks_only_vision_markers():
    text = "a <|vision_start|><|image_pad|><|vision_end|> b <|im_end|> <|video_pad|>"
    out = defuse(text)
    assert (
        "<|image_pad|>" not in out and "<|vision_start|>" not in out and "<|video_pad|>" not in out
    )
    assert "<|im_end|>" in out and out.replace("\u2060", "") == text


def test_image_identity_matches_the_same_image_sent_again():
    b64 = base64.b64encode(png(28, 28)).decode()
    a = [{"type": "text", "text": "x "}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}]  # fmt: skip
    b = [{"type": "text", "text": "x"}, {"type": "image", "source": {"data": b64, "media_type": "image/png", "type": "base64"}, "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    c = [{"type": "text", "text": "x"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png(28, 29)).decode()}}]  # fmt: skip
    assert content_key(a) == content_key(b) != content_key(c)
    assert content_key("  plain ") == "plain" == content_key([{"type": "text", "text": "plain"}])


def test_samples_file_keeps_the_tensors_exactly():
    pv = torch.randn(12, 1176)
    grid = torch.tensor([[1, 2, 6]])
    s = Sample(
        index=1, tokens=[1, 2, 3], response_length=1, loss_mask=[1], rollout_log_probs=[-0.5]
    )
    s.multimodal_inputs = {"images": [data_url(png(28, 28))]}
    s.multimodal_train_inputs = {"pixel_values": pv, "image_grid_thw": grid}
    back = Sample.from_dict(json.loads(json.dumps(s.to_dict())))
    assert torch.equal(back.multimodal_train_inputs["pixel_values"], pv)
    assert back.multimodal_train_inputs["image_grid_thw"].dtype == torch.int64
    assert torch.equal(back.multimodal_train_inputs["image_grid_thw"], grid)
    assert back.multimodal_inputs == s.multimodal_inputs
    assert s.multimodal_train_inputs["pixel_values"] is pv  # to_dict leaves the sample as it was

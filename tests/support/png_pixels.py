"""Decode an 8-bit RGB/RGBA PNG (as Chromium writes screenshots) to a numpy array; no Pillow."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np


def _paeth_or_average(line: bytes, prev: bytes, bpp: int, kind: int) -> bytes:
    cur = bytearray(line)
    for x in range(len(cur)):
        a = cur[x - bpp] if x >= bpp else 0
        b = prev[x]
        if kind == 3:
            cur[x] = (cur[x] + ((a + b) >> 1)) & 255
            continue
        c = prev[x - bpp] if x >= bpp else 0
        pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
        cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return bytes(cur)


def decode_png(path: Path) -> np.ndarray:
    """``(height, width, channels)`` uint8 pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), f"unsupported PNG depth {depth} colour {color}"
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, width * bpp + 1)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:]
        if kind == 0:
            cur = line.copy()
        elif kind == 1:  # Sub: a running sum per channel, modulo 256
            cur = (np.cumsum(line.reshape(width, bpp).astype(np.int64), axis=0) % 256).astype(
                np.uint8
            )
            cur = cur.reshape(-1)
        elif kind == 2:  # Up
            cur = line + prev
        else:
            cur = np.frombuffer(
                _paeth_or_average(line.tobytes(), prev.tobytes(), bpp, kind), np.uint8
            )
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)

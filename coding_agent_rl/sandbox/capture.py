"""Bounded capture of a process's output: a runaway writer cannot exhaust host memory."""

from __future__ import annotations

from coding_agent_rl.sandbox.base import TRUNCATION_MARKER


class CappedBuffer:
    """Keeps the first ``cap`` bytes and counts the rest."""

    __slots__ = ("_data", "cap", "total")

    def __init__(self, cap: int):
        self.cap = cap
        self.total = 0
        self._data = bytearray()

    def append(self, chunk: bytes | str) -> None:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "surrogateescape")
        self.total += len(chunk)
        room = self.cap - len(self._data)
        if room > 0:
            self._data += chunk[:room]

    def raw(self) -> bytes:
        return bytes(self._data)

    def text(self) -> str:
        """Decoded text (bad UTF-8 replaced) with the visible marker where bytes were dropped."""
        text = self._data.decode("utf-8", "replace")
        if self.total > len(self._data):
            text += TRUNCATION_MARKER.format(n=self.total - len(self._data))
        return text

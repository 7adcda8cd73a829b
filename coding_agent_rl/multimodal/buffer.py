"""Per-turn processor tensors, buffered and merged ONCE per key when the sample is finalised.

A multi-turn sample collects ``pixel_values`` / ``image_grid_thw`` chunks turn by turn. Joining
them as they arrive (``acc = cat(acc, chunk)`` every turn) copies every earlier image again on
each turn: O(n^2) bytes copied and a peak of two full copies. :class:`TrainInputsBuffer` keeps
the chunks and concatenates each key once (O(n), one allocation per key): what slime's
multi-turn design asks for. :func:`merge_every_turn` is that naive way, kept for the benchmark
(``coding-agent-rl bench multimodal``).
"""

from __future__ import annotations

from typing import Any


def _cat(values: list[Any]) -> Any:
    import torch

    if all(isinstance(v, torch.Tensor) for v in values):
        return values[0] if len(values) == 1 else torch.cat(values, dim=0)
    out: list[Any] = []
    for v in values:
        out.extend(v if isinstance(v, (list, tuple)) else [v])
    return out


def merge_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Each key's values concatenated along dim 0, once; None when there is nothing."""
    keys: list[str] = []
    for chunk in chunks:
        keys.extend(k for k in chunk if k not in keys)
    if not keys:
        return None
    return {k: _cat([c[k] for c in chunks if k in c]) for k in keys}


class TrainInputsBuffer:
    """Chunks in arrival order; :meth:`merge` joins them once per key."""

    def __init__(self) -> None:
        self.chunks: list[dict[str, Any]] = []

    def add(self, chunk: dict[str, Any] | None) -> None:
        if chunk:
            self.chunks.append(chunk)

    def merge(self) -> dict[str, Any] | None:
        return merge_chunks(self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)


def merge_every_turn(acc: dict[str, Any] | None, chunk: dict[str, Any]) -> dict[str, Any]:
    """The naive way (benchmark baseline): a new full concatenation after every turn."""
    if acc is None:
        return {k: (v.clone() if hasattr(v, "clone") else list(v)) for k, v in chunk.items()}
    merged = merge_chunks([acc, chunk])
    assert merged is not None
    return merged

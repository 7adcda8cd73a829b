"""Token drift: does a new prompt continue the token stream recorded so far?

A later prompt extends the stream (``EXTEND``), realigns it (``REALIGN``: a small replaced span
inside the last response) or forks (``FORK``: a new sample whose history is prompt). The rules
and why: docs/modules/trajectory.md.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

DEFAULT_REALIGN_MAX = 8


class Drift(str, enum.Enum):
    EXTEND = "extend"
    REALIGN = "realign"
    FORK = "fork"


class Continuation(NamedTuple):
    kind: Drift
    at: int  # where the new prompt leaves the recorded stream (len(stream) for EXTEND)


def common_prefix(a: Sequence[int], b: Sequence[int], chunk: int = 4096) -> int:
    """Length of the common prefix; slice comparisons keep 100k-token prompts fast."""
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + chunk, n)
        if a[i:j] != b[i:j]:
            break
        i = j
    while i < n and a[i] == b[i]:
        i += 1
    return i


def classify(
    prev_prompt: Sequence[int],
    prev_output: Sequence[int],
    prompt: Sequence[int],
    realign_max: int = DEFAULT_REALIGN_MAX,
) -> Continuation:
    """How ``prompt`` continues the stream ``prev_prompt + prev_output``."""
    stream_len = len(prev_prompt) + len(prev_output)
    d = common_prefix(prev_prompt, prompt)
    if d == len(prev_prompt):
        d += common_prefix(prev_output, prompt[d:])
    if d == stream_len:
        return Continuation(Drift.EXTEND, d)
    if d >= len(prev_prompt) and stream_len - d <= realign_max:
        return Continuation(Drift.REALIGN, d)
    return Continuation(Drift.FORK, d)

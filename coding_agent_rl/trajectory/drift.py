"""Token drift: does a new prompt continue the token stream recorded so far?

The stream after a turn is ``turn.prompt_ids + turn.output_ids``. A later prompt either

* ``EXTEND``\\s it: it starts with the whole stream (the normal case; the adapter renders only the
  new messages and appends them to the recorded ids);
* ``REALIGN``\\s it: it diverges *inside the last response* at token ``d`` and the replaced span
  ``stream[d:]`` holds at most ``realign_max`` tokens (e.g. a different stop token, a trimmed
  trailing newline). The stream is cut at ``d`` and continued with the prompt's own tokens. Two
  rules fix the bugs reported against slime: the gate is the length of the *replaced span*
  (never the new output's length), and only tokens from ``d`` on are replaced: sampled tokens
  before ``d`` stay in the stream and stay trained. The replaced sampled tokens (at most
  ``realign_max`` per realignment) are the only sampled tokens that end up untrained;
* ``FORK``\\s: anything else (a mismatch before the last response, or a longer replaced span).
  A new sample starts whose whole history is prompt.
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

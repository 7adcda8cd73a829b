"""Same-type perturbations of a test's expected value, for must-fail canaries.

:func:`value_line` gives ``k + 1`` distinct values of the expected value's type and shape — the
expected value at a uniformly random position ``j``, the others reached from it by a chain of
one-element edits to the left and right. Each edit keeps the type, length and layout: a string
character replaced by another of its class (lower, upper, digit, punctuation), an integer or float
moved by a small step without changing its sign, a bool flipped inside a container, one element
of a list/tuple or one value of a dict edited the same way. Never a wrapper.

Why no statistic of the line singles out the original: every edit kernel is symmetric
(``K(a -> b) == K(b -> a)``: the edited positions and classes are the same in ``a`` and ``b``,
steps are drawn from a symmetric set; an edit leaving the domain is a self-loop, and lines with
repeated values are redrawn whole). The probability of drawing the line ``v_0..v_k`` with the
original at ``j`` is therefore ``1/(k+1) * prior(v_j is the answer) * prod K(v_i, v_i+1)``: the
product does not depend on ``j``, so names, positions, values and the distances between them
(the "centre" of the line included) carry no information about ``j`` beyond a prior on which
value is the right answer — i.e. knowing the answer. Floats are the one approximation: the step
scales with the value's magnitude, so a line crossing a power of ten is slightly asymmetric.
See docs/grading.md ("Canaries").
"""

from __future__ import annotations

import math
import random
import string
from typing import Any

CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits, string.punctuation)
INT_STEP = 5  # integers move by 1..INT_STEP either way
TRIES = 50


def _class_of(ch: str) -> str | None:
    return next((c for c in CLASSES if ch in c), None)


def editable(value: Any) -> bool:
    """Whether one-element edits of ``value`` exist (standalone bools have no third value)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return any(_class_of(ch) for ch in value)
    if isinstance(value, bytes):
        return any(_class_of(chr(b)) for b in value)
    if isinstance(value, (list, tuple)):
        return any(editable(v) for v in value)
    if isinstance(value, dict):
        return any(editable(v) for v in value.values())
    return False


def edit(value: Any, rng: random.Random) -> Any:
    """One symmetric edit of ``value`` (it may return ``value`` itself: a self-loop)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        new = value + rng.choice((-1, 1)) * rng.randint(1, INT_STEP)
        return new if (new < 0) == (value < 0) else value
    if isinstance(value, float):
        scale = 10.0 ** (math.floor(math.log10(abs(value))) - 1) if value else 0.1
        moved = float(f"{value + rng.choice((-1, 1)) * rng.randint(1, 9) * scale:.12g}")
        return moved if (moved < 0) == (value < 0) and math.isfinite(moved) else value
    if isinstance(value, str):
        return _edit_text(value, rng)
    if isinstance(value, bytes):
        return _edit_text(value.decode("latin-1"), rng).encode("latin-1")
    if isinstance(value, (list, tuple)):
        items = list(value)
        i = rng.choice([i for i, v in enumerate(items) if editable(v)])
        items[i] = edit(items[i], rng)
        return type(value)(items) if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        out = dict(value)
        key = rng.choice([k for k, v in out.items() if editable(v)])
        out[key] = edit(out[key], rng)
        return out
    raise TypeError(f"no edit for {type(value).__name__}")


def _edit_text(text: str, rng: random.Random) -> str:
    i = rng.choice([i for i, ch in enumerate(text) if _class_of(ch)])
    cls = _class_of(text[i])
    assert cls is not None
    new = rng.choice([c for c in cls if c != text[i]])
    return text[:i] + new + text[i + 1 :]


def _key(value: Any) -> str:
    return f"{type(value).__name__}:{value!r}"


def value_line(value: Any, k: int, rng: random.Random) -> tuple[list[Any], int] | None:
    """``(values, j)``: ``k + 1`` distinct same-type values with ``values[j] == value`` and ``j``
    uniform; ``None`` when ``value`` has no such line (see the module docstring)."""
    if k < 1 or not editable(value):
        return None
    j = rng.randrange(k + 1)
    for _ in range(TRIES):
        left, right = [value], [value]
        for _ in range(j):
            left.append(edit(left[-1], rng))
        for _ in range(k - j):
            right.append(edit(right[-1], rng))
        values = left[:0:-1] + right
        keys = {_key(v) for v in values}
        if len(keys) == k + 1 and all(
            a != b for i, a in enumerate(values) for b in values[i + 1 :]
        ):
            return values, j
    return None

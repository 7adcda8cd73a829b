"""Same-type perturbations of a test's expected value, for must-fail canaries.

:func:`value_line` gives ``k + 1`` values of the expected value's type and shape that differ in
one place, evenly spaced on a line with the original at a uniformly random position. Why no
statistic of the set singles out the original: docs/modules/grading.md.
"""

from __future__ import annotations

import math
import random
from typing import Any

# One order for every printable ASCII character but space: a line through ``a`` may run through
# ``_``; classes (letters only, digits only) would pin values at a class's end to an end of the line.
CLASSES = ("".join(chr(c) for c in range(33, 127)),)
MAX_STEP = 5  # the line's spacing d is drawn from 1..MAX_STEP
TRIES = 30
Path = tuple[Any, ...]  # keys/indices into nested containers, then ("char", i) for a string


def _class_of(ch: str) -> str | None:
    return next((c for c in CLASSES if ch in c), None)


def _places(value: Any, path: Path = ()) -> list[Path]:
    """Every place a line can run through: numbers, and characters of strings."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return [path]
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        return [(*path, ("char", i)) for i, ch in enumerate(text) if _class_of(ch)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _places(v, (*path, i))]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _places(v, (*path, k))]
    return []


def _moved(leaf: Any, step: int) -> Any:
    """``leaf`` moved ``step`` spacing units (None: off its class)."""
    if isinstance(leaf, int):
        return leaf + step
    scale = 10.0 ** (math.floor(math.log10(abs(leaf))) - 1) if leaf else 0.1
    moved = float(f"{leaf + step * scale:.12g}")
    return moved if math.isfinite(moved) else None


def _at(value: Any, path: Path, step: int) -> Any:
    """``value`` with the place ``path`` moved by ``step`` (None: the line leaves the class)."""
    if not path:
        return _moved(value, step)
    head, rest = path[0], path[1:]
    if isinstance(head, tuple):  # ("char", i)
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        i = head[1]
        cls = _class_of(text[i])
        assert cls is not None
        where = cls.index(text[i]) + step
        if not 0 <= where < len(cls):
            return None
        out = text[:i] + cls[where] + text[i + 1 :]
        return out.encode("latin-1") if isinstance(value, bytes) else out
    inner = _at(value[head], rest, step)
    if inner is None:
        return None
    if isinstance(value, dict):
        return {**value, head: inner}
    items = list(value)
    items[head] = inner
    return items if isinstance(value, list) else tuple(items)


def _key(value: Any) -> str:
    return f"{type(value).__name__}:{value!r}"


def value_line(value: Any, k: int, rng: random.Random) -> tuple[list[Any], int] | None:
    """``(values, j)``: ``k + 1`` distinct same-type values on a line with ``values[j] == value``
    and ``j`` uniform; ``None`` when ``value`` has no such line (see the module docstring)."""
    places = _places(value)
    if k < 1 or not places:
        return None
    j = rng.randrange(k + 1)
    for _ in range(TRIES):
        d = rng.randint(1, MAX_STEP)
        place = rng.choice(places)
        values = [_at(value, place, (i - j) * d) for i in range(k + 1)]
        if any(v is None for v in values):
            continue
        if len({_key(v) for v in values}) == k + 1 and all(
            a != b for i, a in enumerate(values) for b in values[i + 1 :]
        ):
            return values, j
    return None

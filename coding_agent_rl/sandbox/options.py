"""Typed backend options: unknown keys and wrong types are rejected, never ignored."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def _accepts(tp: Any, value: Any) -> bool:
    """A shallow isinstance check for the annotations options use."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin is not None:
        tp = origin
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp in (list, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, tp)


def parse_options(cls: type[T], backend: str, options: dict[str, Any]) -> T:
    """Build the options dataclass ``cls`` from ``options``.

    Raises ``ValueError`` naming an unknown option (and listing the valid ones) or an option
    whose value has the wrong type.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    for key, value in options.items():
        if key not in fields:
            raise ValueError(
                f"unknown option {key!r} for the {backend} sandbox; valid: {', '.join(sorted(fields))}"
            )
        if not _accepts(hints[key], value):
            raise ValueError(
                f"option {key!r} of the {backend} sandbox must be {hints[key]}, got {value!r}"
            )
    return cls(**options)

"""Typed backend options: unknown keys and wrong types are rejected, never ignored.

Each backend declares its options as a dataclass (``DockerOptions``, ``LocalOptions``, ...);
each given value is checked against its field's annotation by pydantic in strict mode (no
coercion: ``"2"`` is not a number, ``True`` is not a count, a dict's values are checked too),
and the dataclass is built from the values as given.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, TypeVar

import pydantic

T = TypeVar("T")


@functools.lru_cache(maxsize=256)
def _adapter(cls: type, name: str) -> tuple[Any, pydantic.TypeAdapter[Any]]:
    hint = typing.get_type_hints(cls)[name]
    return hint, pydantic.TypeAdapter(hint)


def parse_options(cls: type[T], backend: str, options: dict[str, Any]) -> T:
    """Build the options dataclass ``cls`` from ``options``.

    Raises ``ValueError`` naming an unknown option (and listing the valid ones) or an option
    whose value has the wrong type (and why).
    """
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key, value in options.items():
        if key not in fields:
            raise ValueError(
                f"unknown option {key!r} for the {backend} sandbox; valid: {', '.join(sorted(fields))}"
            )
        hint, adapter = _adapter(typing.cast(type, cls), key)
        try:
            adapter.validate_python(value, strict=True)
        except pydantic.ValidationError as e:
            first = e.errors()[0]
            where = "".join(f"[{p!r}]" for p in first["loc"])
            raise ValueError(
                f"option {key!r} of the {backend} sandbox must be {hint}, got {value!r} "
                f"({first['msg'][0].lower()}{first['msg'][1:]}{' at ' + where if where else ''})"
            ) from None
    return cls(**options)

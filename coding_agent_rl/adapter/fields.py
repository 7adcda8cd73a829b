"""Request-field validation shared by the wire formats: a bad field is the client's error.

The agent inside the sandbox can call the adapter with its own session key and any body it likes.
Every field the adapter uses is checked here against its wire format's type and range, so that a
malformed request is answered ``400`` in the client's format (:class:`BadRequest`: the client's —
the model's — error) and never reaches the renderer or SGLang as a value that would fail there
(an adapter ``500`` or an SGLang rejection). :func:`coding_agent_rl.adapter.wire.parse_request`
turns anything a format's parser still trips over into a ``400`` too.
"""

from __future__ import annotations

import math
from typing import Any

from coding_agent_rl.adapter.errors import BadRequest

MAX_STOP = 32  # stop sequences per request
MAX_STOP_CHARS = 1000


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def opt_int(body: dict[str, Any], key: str, *, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"{key}: expected an integer >= {minimum}, got {_show(value)}")
    return value


def opt_number(
    body: dict[str, Any], key: str, *, low: float, high: float, low_open: bool = False
) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value < low or value > high or (low_open and value == low)):
        ok = False
    if not ok:
        bound = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise BadRequest(f"{key}: expected a number in {bound}, got {_show(value)}")
    return float(value)


def opt_bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"{key}: expected true or false, got {_show(value)}")
    return value


def opt_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{key}: expected a string, got {_show(value)}")
    return value


def opt_object(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = body.get(key)
    if value is not None and not isinstance(value, dict):
        raise BadRequest(f"{key}: expected an object, got {_show(value)}")
    return value


def opt_list(body: dict[str, Any], key: str) -> list[Any] | None:
    value = body.get(key)
    if value is not None and not isinstance(value, list):
        raise BadRequest(f"{key}: expected a list, got {_show(value)}")
    return value


def opt_stop(body: dict[str, Any], key: str, *, single_ok: bool) -> list[str] | None:
    """A list of stop strings (OpenAI also takes a single string)."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, str) and single_ok:
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > MAX_STOP
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in value)
    ):
        raise BadRequest(f"{key}: expected up to {MAX_STOP} non-empty strings, got {_show(value)}")
    return value or None


def sampling(
    body: dict[str, Any],
    *,
    max_tokens: tuple[str, ...],
    stop: str | None,
    stop_single_ok: bool = False,
    top_k: bool = True,
) -> dict[str, Any]:
    """SGLang sampling params from a request, every field checked. ``max_tokens``: the field
    names that may carry it, first present wins."""
    out: dict[str, Any] = {}
    for key in max_tokens:
        value = opt_int(body, key, minimum=1)
        if value is not None and "max_new_tokens" not in out:
            out["max_new_tokens"] = value
    temperature = opt_number(body, "temperature", low=0.0, high=2.0)
    top_p = opt_number(body, "top_p", low=0.0, high=1.0, low_open=True)
    if temperature is not None:
        out["temperature"] = temperature
    if top_p is not None:
        out["top_p"] = top_p
    if top_k:
        k = body.get("top_k")
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int) or k < -1:
                raise BadRequest(f"top_k: expected an integer >= -1, got {_show(k)}")
            if k > 0:  # 0 and -1 mean "no top-k" to the clients that send them
                out["top_k"] = k
    if stop is not None and (stops := opt_stop(body, stop, single_ok=stop_single_ok)):
        out["stop"] = stops
    return out


def common(body: dict[str, Any]) -> None:
    """Fields every format shares: ``model``, ``stream``, ``metadata``, ``user``, ``tools``."""
    opt_str(body, "model")
    opt_bool(body, "stream")
    opt_object(body, "metadata")
    opt_str(body, "user")
    tools = opt_list(body, "tools")
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise BadRequest(f"tools[{i}]: expected an object, got {_show(tool)}")

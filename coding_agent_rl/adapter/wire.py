"""The contract each wire format implements (one class per format, one instance per request)."""

from __future__ import annotations

import abc
import dataclasses
import json
import secrets
import string
from typing import Any

from coding_agent_rl.adapter.errors import AdapterError, BadRequest

_ALNUM = string.ascii_letters + string.digits


def new_id(prefix: str, n: int = 24) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(n))


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {body}\n\n".encode()


@dataclasses.dataclass
class WireRequest:
    """A request translated to canonical form (see ``trajectory/turn.py``)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    sampling: dict[str, Any]  # SGLang names: max_new_tokens, temperature, top_p, top_k, stop
    stream: bool
    model: str
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)  # format-private state


@dataclasses.dataclass
class Reply:
    """One generated turn, ready to be written in the client's format."""

    model: str
    message: dict[str, Any]  # canonical assistant message (parsed)
    finish_reason: str  # "stop" | "length" | "abort"
    prompt_tokens: int
    completion_tokens: int
    matched_stop: str | None = None
    cached_tokens: int = 0

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [c.get("function", c) for c in self.message.get("tool_calls") or []]

    @property
    def text(self) -> str:
        return self.message.get("content") or ""

    @property
    def reasoning(self) -> str:
        return self.message.get("reasoning_content") or ""

    @property
    def truncated(self) -> bool:
        return self.finish_reason != "stop"


class WireFormat(abc.ABC):
    """Translates one request in and one reply (JSON or SSE) out."""

    name: str
    content_type_json = "application/json"

    @abc.abstractmethod
    def parse(self, body: dict[str, Any]) -> WireRequest:
        """Raise :class:`BadRequest` for a body that is not a valid request."""

    @abc.abstractmethod
    def error_body(self, err: AdapterError) -> dict[str, Any]: ...

    @abc.abstractmethod
    def json_body(self, reply: Reply) -> dict[str, Any]: ...

    @abc.abstractmethod
    def stream_open(self, model: str, prompt_tokens: int) -> bytes:
        """Events sent before generation starts (so the client sees progress at once)."""

    @abc.abstractmethod
    def stream_reply(self, reply: Reply) -> bytes:
        """The remaining events, through the end of the stream."""

    @abc.abstractmethod
    def stream_error(self, err: AdapterError) -> bytes:
        """An error event for a stream that already started."""

    def heartbeat(self) -> bytes:
        """Keeps idle-timeouts of the client from firing during a long generation."""
        return b": keepalive\n\n"


def parse_request(wire: WireFormat, body: dict[str, Any]) -> WireRequest:
    """``wire.parse(body)``; whatever a malformed body trips in the parser is the client's error
    (``400`` in its own format), never an adapter failure."""
    try:
        return wire.parse(body)
    except AdapterError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as e:
        raise BadRequest(f"malformed {wire.name} request: {type(e).__name__}: {e}") from e

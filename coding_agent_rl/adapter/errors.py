"""Errors the adapter answers with; each wire format renders them in its own error shape."""

from __future__ import annotations


class AdapterError(Exception):
    """An HTTP error for the agent CLI. ``kind`` is wire-neutral; the wire class maps it."""

    status = 500
    kind = "api_error"

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class BadRequest(AdapterError):
    status, kind = 400, "invalid_request_error"


class Unauthorized(AdapterError):
    status, kind = 401, "authentication_error"


class TooLarge(AdapterError):
    status, kind = 413, "request_too_large"


class TurnLimit(AdapterError):
    status, kind = 429, "rate_limit_error"


class SessionClosed(AdapterError):
    status, kind = 503, "overloaded_error"


class UpstreamError(AdapterError):
    """SGLang failed or could not be reached (after retries)."""

    status, kind = 502, "api_error"


class PolicyAborted(AdapterError):
    """The policy server answered ``finish_reason: abort`` to a request we did not abort (the
    trainer aborted its engines): the session ends; the CLI must not retry."""

    status, kind = 503, "overloaded_error"


class ClientGone(Exception):
    """The agent CLI disconnected before the reply was fully written (logged as 499)."""

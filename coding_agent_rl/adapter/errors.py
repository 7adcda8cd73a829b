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


class RateLimited(AdapterError):
    """Too many requests in flight, or too fast: the client may retry after ``retry_after`` s."""

    status, kind = 429, "rate_limit_error"

    def __init__(self, message: str, *, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class SessionClosed(AdapterError):
    status, kind = 503, "overloaded_error"


class UpstreamError(AdapterError):
    """SGLang failed or could not be reached (after retries)."""

    status, kind = 502, "api_error"


class ClientGone(Exception):
    """The agent CLI disconnected before the reply was fully written (logged as 499)."""

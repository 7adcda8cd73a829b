"""Errors the adapter answers with; each wire format renders them in its own error shape.

``infra_evidence``: whether the error is evidence of an infrastructure failure that the rollout
may count against the infrastructure (``failure_kind: infra``). Only a policy-server failure that
a health probe of the server confirms is; a malformed request (400), a refusal, or an adapter
error a request provoked are not — the agent can send any of those on demand with its own key.
"""

from __future__ import annotations

from typing import ClassVar

from coding_agent_rl.errors import CodingAgentRLError, FailureKind
from coding_agent_rl.model import errors as model_errors


class AdapterError(CodingAgentRLError):
    """An HTTP error for the agent CLI. ``kind`` is wire-neutral; the wire class maps it.
    A request error is the agent's doing (``failure_kind`` model) unless a subclass says not."""

    failure_kind: ClassVar[FailureKind] = "model"
    default_stage = "adapter"

    status = 500
    kind = "api_error"
    infra_evidence = False

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


class PolicyRejected(BadRequest):
    """SGLang refused the request as invalid (4xx): the request's doing, answered 400."""


class UpstreamError(AdapterError):
    """SGLang failed or could not be reached (after retries). ``confirmed``: a health probe of
    the policy server failed right after (see :attr:`AdapterError.infra_evidence`)."""

    failure_kind = "infra"
    default_stage = "policy"

    status, kind = 502, "api_error"

    def __init__(self, message: str, *, status: int | None = None, confirmed: bool = False):
        super().__init__(message, status=status)
        self.infra_evidence = confirmed


class PolicyAborted(AdapterError):
    """The policy server answered ``finish_reason: abort`` to a request we did not abort (the
    trainer aborted its engines): the session ends; the CLI must not retry."""

    failure_kind = "aborted"

    status, kind = 503, "overloaded_error"


class ClientGone(CodingAgentRLError):
    """The agent CLI disconnected before the reply was fully written (logged as 499)."""

    failure_kind: ClassVar[FailureKind] = "model"
    default_stage = "adapter"


def from_model_error(err: model_errors.ModelError) -> AdapterError:
    """The HTTP error the adapter answers with for a failed model call."""
    if isinstance(err, model_errors.UpstreamError):
        return UpstreamError(err.message, status=err.status, confirmed=err.infra_evidence)
    return PolicyRejected(err.message)


def error_note(err: AdapterError) -> str:
    """How a session records an error it answered: ``infra: ...`` when the error is evidence of
    an infrastructure failure, ``request: ...`` otherwise (kept for the record, never counted)."""
    return f"{'infra' if err.infra_evidence else 'request'}: {err.message}"

"""Errors of the policy model client, independent of any HTTP front.

:class:`PolicyRejected`: the policy server refused the request as invalid (the request's doing).
:class:`UpstreamError`: it failed or could not be reached; ``infra_evidence`` is set only when a
health probe of the server failed right after, or the server still answered 503 (unavailable)
after the client's backoff (see ``model/sglang.py``).
"""

from __future__ import annotations

from typing import ClassVar

from coding_agent_rl.errors import CodingAgentRLError, FailureKind


class ModelError(CodingAgentRLError):
    """A model call failed; ``status`` is the HTTP status a front end should answer with."""

    failure_kind: ClassVar[FailureKind] = "model"
    default_stage = "policy"
    status = 500
    infra_evidence = False

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class PolicyRejected(ModelError):
    """The policy server refused the request as invalid (4xx)."""

    status = 400


class UpstreamError(ModelError):
    """The policy server failed or could not be reached; ``confirmed``: a health probe failed."""

    failure_kind = "infra"
    status = 502

    def __init__(self, message: str, *, status: int | None = None, confirmed: bool = False):
        super().__init__(message, status=status)
        self.infra_evidence = confirmed

"""One error vocabulary: a root error carrying its failure kind, one subclass per boundary.

Failure kinds (:data:`FailureKind`): ``infra`` (ours; dropped and retried), ``model`` (the
policy's outcome), ``data`` (an unusable row), ``aborted`` (the trainer aborted). Each layer
crossing raises its own subclass; :func:`boundary` wraps anything else. :class:`UserError` is bad
command-line input (one line, exit 2). Details: docs/modules/core.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import ClassVar, Literal, get_args

FailureKind = Literal["infra", "model", "data", "aborted"]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)


class CodingAgentRLError(Exception):
    """The root: every error of ours says whose failure it is (``failure_kind``) and where (``stage``)."""

    failure_kind: ClassVar[FailureKind] = "infra"
    default_stage: ClassVar[str] = "internal"

    def __init__(self, message: str = "", *, stage: str | None = None):
        super().__init__(message)
        self.stage = stage or self.default_stage


class UserError(CodingAgentRLError):
    """Bad input from the user: the CLI prints it as one line and exits 2."""

    failure_kind: ClassVar[FailureKind] = "data"
    default_stage = "input"


class InfraFailure(CodingAgentRLError):
    """A failure that is not the model's, at a named ``stage`` (sandbox, workspace, install,
    policy, agent, grading, deadline, internal): the rollout is dropped and retried."""

    def __init__(self, message: str, *, stage: str):
        super().__init__(message, stage=stage)


class SandboxError(CodingAgentRLError, RuntimeError):
    """An infrastructure failure of the sandbox layer (never the model's fault)."""

    default_stage = "sandbox"


class SandboxCreateError(SandboxError):
    """The sandbox could not be created."""


class HarnessError(CodingAgentRLError, RuntimeError):
    """The agent CLI could not be fetched, installed or configured (ours, not the model's)."""

    default_stage = "install"


class PolicyError(CodingAgentRLError, RuntimeError):
    """The policy server failed (confirmed by a health probe where the agent could provoke it)."""

    default_stage = "policy"


class GradingError(CodingAgentRLError, RuntimeError):
    """Grading could not run (its sandbox, its set-up, a parser): never scored as the model's."""

    default_stage = "grading"


class TaskDataError(CodingAgentRLError, ValueError):
    """A task row or dataset is malformed or unusable; the message names the file:line."""

    failure_kind = "data"
    default_stage = "data"


class NothingTrainable(CodingAgentRLError):
    """The policy's own rollout left no token to train on (e.g. its tool output filled the
    context): the model's outcome, with nothing to keep but its reward 0."""

    failure_kind = "model"
    default_stage = "samples"


class EnvFailure(CodingAgentRLError):
    """A native-loop environment failed (not the model's); see :mod:`coding_agent_rl.env.base`."""

    default_stage = "env"


class RolloutAborted(CodingAgentRLError):
    """The trainer aborted the policy server's requests: the rollout ends, unretried."""

    failure_kind = "aborted"
    default_stage = "aborted"


class _Boundary(
    contextlib.AbstractContextManager[None], contextlib.AbstractAsyncContextManager[None]
):
    """See :func:`boundary`."""

    def __init__(
        self,
        error: type[CodingAgentRLError],
        doing: str,
        stage: str | None,
        passes: tuple[type[BaseException], ...],
    ):
        self.error, self.doing, self.stage, self.passes = error, doing, stage, passes

    def _translate(self, exc: BaseException | None) -> None:
        if exc is None or isinstance(exc, (*self.passes, asyncio.CancelledError)):
            return  # typed errors pass unchanged; cancellation is never a failure of ours
        if not isinstance(exc, Exception):
            return  # KeyboardInterrupt, SystemExit
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            message = f"{self.doing}: timed out"
        else:
            message = f"{self.doing}: {exc}"
        raise self.error(message, stage=self.stage) from exc

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: object, exc: BaseException | None, tb: object) -> None:
        self._translate(exc)

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, et: object, exc: BaseException | None, tb: object) -> None:
        self._translate(exc)


def boundary(
    error: type[CodingAgentRLError],
    doing: str,
    *,
    stage: str | None = None,
    passes: tuple[type[BaseException], ...] = (CodingAgentRLError,),
) -> _Boundary:
    """Wrap a layer crossing (``with`` or ``async with``): errors of the ``passes`` types (by
    default every error of ours) and cancellation pass unchanged; anything else, timeouts
    included, is re-raised as ``error`` (at ``stage``) with a message naming what was being
    done (``"agent install: ..."``) and the original as its cause."""
    return _Boundary(error, doing, stage, passes)


__all__ = [
    "FAILURE_KINDS",
    "CodingAgentRLError",
    "EnvFailure",
    "FailureKind",
    "GradingError",
    "HarnessError",
    "InfraFailure",
    "PolicyError",
    "RolloutAborted",
    "SandboxError",
    "TaskDataError",
    "UserError",
    "boundary",
]

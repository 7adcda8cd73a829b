"""The error vocabulary: every error says whose failure it is; boundaries attribute the rest."""

from __future__ import annotations

import asyncio

import pytest

from coding_agent_rl import errors
from coding_agent_rl.adapter.errors import BadRequest, PolicyAborted, UpstreamError
from coding_agent_rl.datasets.schema import DatasetError
from coding_agent_rl.env.base import EnvError
from coding_agent_rl.grading.diff import DiffCaptureError
from coding_agent_rl.grading.git import WorkspaceError
from coding_agent_rl.harness import InstallError
from coding_agent_rl.model import errors as model_errors
from coding_agent_rl.sandbox import ImageNotFound


@pytest.mark.parametrize(
    ("error", "kind", "stage"),
    [
        (ImageNotFound("no image"), "infra", "sandbox"),
        (InstallError("no binary"), "infra", "install"),
        (UpstreamError("502"), "infra", "policy"),
        (model_errors.UpstreamError("502"), "infra", "policy"),
        (model_errors.PolicyRejected("bad"), "model", "policy"),
        (WorkspaceError("pre_commands failed"), "infra", "workspace"),
        (DatasetError("tasks.jsonl:3: no image"), "data", "data"),
        (EnvError("flaky"), "infra", "env"),
        (DiffCaptureError("no .git"), "model", "diff"),
        (BadRequest("malformed"), "model", "adapter"),
        (PolicyAborted("abort"), "aborted", "adapter"),
        (errors.RolloutAborted("abort"), "aborted", "aborted"),
        (errors.UserError("bad flag"), "data", "input"),
    ],
)
def test_every_boundary_error_carries_its_kind_and_stage(error, kind, stage):
    assert isinstance(error, errors.CodingAgentRLError)
    assert error.failure_kind == kind and error.stage == stage
    assert kind in errors.FAILURE_KINDS


async def test_the_boundary_wraps_the_unexpected_and_names_what_was_done():
    with pytest.raises(errors.HarnessError) as e:
        async with errors.boundary(errors.HarnessError, "agent install"):
            {}["missing"]  # a bug of ours, or a library's surprise
    assert str(e.value) == "agent install: 'missing'" and isinstance(e.value.__cause__, KeyError)
    assert e.value.failure_kind == "infra" and e.value.stage == "install"


async def test_the_boundary_names_a_timeout_and_passes_typed_errors_and_cancellation():
    with pytest.raises(errors.InfraFailure, match=r"^workspace: timed out$") as e:
        async with errors.boundary(errors.InfraFailure, "workspace", stage="workspace"):
            await asyncio.wait_for(asyncio.sleep(1), 0.01)
    assert e.value.stage == "workspace"
    with pytest.raises(DiffCaptureError):  # typed: unchanged, still the model's
        async with errors.boundary(errors.GradingError, "diff"):
            raise DiffCaptureError("the agent removed .git")
    with pytest.raises(asyncio.CancelledError):
        async with errors.boundary(errors.GradingError, "grading"):
            raise asyncio.CancelledError


def test_a_boundary_can_let_only_some_typed_errors_through():
    only = (ImageNotFound,)
    with (
        pytest.raises(ImageNotFound),
        errors.boundary(errors.InfraFailure, "x", stage="install", passes=only),
    ):
        raise ImageNotFound("gone")
    with (
        pytest.raises(errors.InfraFailure, match="agent install: pinned binary missing"),
        errors.boundary(errors.InfraFailure, "agent install", stage="install", passes=only),
    ):
        raise InstallError("pinned binary missing")


@pytest.mark.parametrize("confirmed", [False, True])
def test_model_errors_become_the_adapters_http_errors(confirmed):
    from coding_agent_rl.adapter.errors import PolicyRejected, from_model_error

    up = from_model_error(model_errors.UpstreamError("down", status=504, confirmed=confirmed))
    assert isinstance(up, UpstreamError) and up.status == 504
    assert up.infra_evidence is confirmed and up.failure_kind == "infra"
    rejected = from_model_error(model_errors.PolicyRejected("bad ids"))
    assert isinstance(rejected, PolicyRejected) and rejected.status == 400
    assert rejected.failure_kind == "model" and not rejected.infra_evidence

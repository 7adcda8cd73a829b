"""The rollout pipeline: agent sandbox -> act (CLI or native: ``act.py``) -> diff -> clean-sandbox
grading -> record and samples (docs/pipeline.md). A failure is ``infra`` only on evidence the
agent cannot produce; the failure policy is in docs/modules/rollout.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
import socket
import time
import uuid
from collections.abc import Awaitable
from typing import Any

from coding_agent_rl.adapter.sessions import new_session_id
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import (
    FailureKind,
    InfraFailure,
    NothingTrainable,
    RolloutAborted,
    SandboxError,
    TaskDataError,
    boundary,
)
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.diff import CapturedDiff as Diff
from coding_agent_rl.grading.diff import DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import GradeResult, grade
from coding_agent_rl.grading.prepared import GradingSandbox, grading_network
from coding_agent_rl.grading.workspace import prepare_agent_workspace
from coding_agent_rl.rollout.act import BRANCH_TAP, Act, ActResult, BranchTap, Job
from coding_agent_rl.rollout.attribution import ArtifactBudget, file_size
from coding_agent_rl.rollout.config import RolloutConfig, RolloutOutcome
from coding_agent_rl.rollout.grading_supply import grading_supply, source_for
from coding_agent_rl.rollout.prepare import supply_for
from coding_agent_rl.rollout.record import RolloutRecord, event
from coding_agent_rl.rollout.sandboxes import FreshSandboxes, SandboxSource
from coding_agent_rl.rollout.teardown import guarded
from coding_agent_rl.rollout.timing import Timings
from coding_agent_rl.sandbox import BACKENDS, Sandbox
from coding_agent_rl.types import Sample, Status, aborted_sample

log = logging.getLogger(__name__)


class RolloutRunner:
    """Runs rollouts of one act (CLI or native); safe to use concurrently."""

    def __init__(
        self,
        *,
        act: Act,
        config: RolloutConfig,
        run_id: str | None = None,
        node: str | None = None,
        sandboxes: SandboxSource | None = None,
    ):
        self.act = act
        self.config = config
        self.network = act.network
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.node = node or socket.gethostname()  # each record's ``node``
        self.sandboxes = sandboxes or FreshSandboxes()
        # Prepared agent sandboxes (pool / one preparation copied per group) for a CLI act:
        # rollout/prepare.py. Inactive unless the config asks for it.
        agent = getattr(act, "agent", None)
        self.supply = supply_for(agent) if agent is not None else None
        # Grading sandboxes copied from one set-up per group (--fork): rollout/grading_supply.py.
        self.grading_supply = grading_supply(config, self._defences)

    async def close(self) -> None:
        """Destroy what the supplies still hold (prepared sandboxes, snapshots)."""
        for supply in (self.supply, self.grading_supply):
            if supply is not None:
                await supply.close()

    async def run(
        self,
        row: TaskRow,
        base: Sample,
        *,
        sampling_params: dict[str, Any] | None = None,
        evaluation: bool = False,
        tap: BranchTap | None = None,
    ) -> RolloutOutcome:
        """Never raises for a per-rollout failure (cancellation still propagates). ``tap``: a
        tree rollout's (rollout/branch.py): its prefix replay, and where its turns are kept."""
        attempts = self.config.infra_retries + 1
        outcome: RolloutOutcome | None = None
        for attempt in range(attempts):
            token = BRANCH_TAP.set(tap)
            try:
                outcome = await self._attempt(row, base, attempt, sampling_params, evaluation)
            finally:
                BRANCH_TAP.reset(token)
            if outcome.record["failure_kind"] != "infra":
                break
            log.warning(
                "rollout %s/%s infra failure (attempt %d/%d): %s",
                row.instance_id,
                base.index,
                attempt + 1,
                attempts,
                outcome.record["abort_reason"],
            )
        assert outcome is not None
        outcome.record["retries"] = attempt
        outcome.record.setdefault("metrics", {})["retries"] = attempt
        return outcome

    async def _attempt(
        self,
        row: TaskRow,
        base: Sample,
        attempt: int,
        sampling_params: dict[str, Any] | None,
        evaluation: bool,
    ) -> RolloutOutcome:
        job = self._begin(row, base, attempt, sampling_params, evaluation)
        samples = await self._guarded(self._in_session(job), job)
        return self._end(job, samples)

    async def _in_session(self, job: Job) -> list[Sample]:
        """The pipeline inside the act's session: a session that cannot open (its adapter
        process gone) is judged like any other failure of the attempt."""
        async with self.act.session(job):
            return await self._pipeline(job)

    async def _guarded(self, work: Awaitable[list[Sample]], job: Job) -> list[Sample]:
        """``work`` within the rollout deadline; a failure becomes the aborted placeholder."""
        base, record = job.base, job.record
        try:
            return await asyncio.wait_for(work, self.config.deadline)
        except RolloutAborted as e:
            return self._abort(base, record, str(e), "aborted", None)
        except TaskDataError as e:  # the task's own data (e.g. a prompt that does not fit)
            return self._abort(base, record, str(e), "data", None)
        except NothingTrainable as e:  # the policy's outcome: counted as 0, nothing to train
            (empty,) = self._abort(base, record, str(e), "model", None)
            record.set(abort_reason=None, fail_reason=str(e))
            # Not removed: its group's statistics count its 0 (a rollout that leaves nothing
            # trainable must not escape its reward); every loss-mask entry is 0.
            return [
                dataclasses.replace(
                    empty,
                    remove_sample=False,
                    status=Status.TRUNCATED,
                    metadata={**empty.metadata, "rollout_reward": 0.0},
                )
            ]
        except (InfraFailure, SandboxError) as e:  # ours: a stage, or our sandbox API's call
            return self._abort(base, record, f"{type(e).__name__}: {e}", "infra", e.stage)
        except asyncio.TimeoutError:
            reason = f"rollout deadline {self.config.deadline:.0f}s"
            return self._abort(base, record, reason, "infra", "deadline")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug must cost one rollout, not the batch
            log.exception("rollout %s crashed", record.session_id)
            reason = f"internal error: {type(e).__name__}: {e}"
            return self._abort(base, record, reason, "infra", "internal")

    def _begin(
        self,
        row: TaskRow,
        base: Sample,
        attempt: int,
        sampling_params: dict[str, Any] | None,
        evaluation: bool,
    ) -> Job:
        """An attempt's session id, timings, record and artifact folder."""
        # The id is the agent's API key too: 128 random bits (adapter/sessions.py).
        sid = new_session_id(f"{self.run_id}-{row.instance_id}-{base.index}-{attempt}-")
        record = RolloutRecord(
            rollout_id=base.rollout_id if base.rollout_id is not None else base.index,
            instance_id=row.instance_id,
            sample_index=base.index,
            group_index=base.group_index,
            session_id=sid,
            isolation={
                "agent_network": self.network.mode,
                "grading_network": grading_network(self.config.backend),
            },
        )
        record.set(node=self.node)
        if base.session_id:
            record.set(routing_key=base.session_id)
        event("start", sid, instance_id=row.instance_id, index=base.index, attempt=attempt)
        art = self._artifact_dir(row, base)
        return Job(row, base, sid, record, Timings(), art, sampling_params, evaluation)

    def _end(self, job: Job, samples: list[Sample]) -> RolloutOutcome:
        record, timings = job.record, job.timings
        if not record.extra.get("teardown_failures"):
            record.extra.pop("teardown_failures", None)
        record.set(timings=timings.as_dict(), profile=timings.profile())
        event(
            "end",
            job.sid,
            reward=record.reward,
            failure_kind=record.failure_kind,
            reason=record.abort_reason or record.get("fail_reason"),
            turns=record.get("turns"),
            total_s=record.get("timings")["total_s"],
        )
        return RolloutOutcome(samples, record.as_dict())

    # ---- the stages -----------------------------------------------------------------------------

    async def _pipeline(self, job: Job) -> list[Sample]:
        async with contextlib.AsyncExitStack() as stack:
            ahead = await self._grading_ahead(job, stack)
            sb, base_commit = await self._agent_sandbox(job, stack)
            with job.timings.phase("install_s"):
                await self.act.prepare(job, sb)
            if ahead is not None:
                # While the agent works (mostly waiting on the policy), not while its sandbox is
                # set up: that is on the critical path, the agent's model turns usually are not.
                ahead.start()
            with job.timings.phase("agent_s"):
                cpu0 = await sb.cpu_seconds()
                try:
                    result = await self.act.act(job, sb)
                finally:  # also when the act failed: what the agent's sandbox spent meanwhile
                    await self._agent_cpu(job, sb, cpu0)
            if result.breach is not None:  # the agent's own doing: the rollout ends here
                event("limit", job.sid, breach=result.breach)
                job.record.set(
                    failure_kind="model", fail_reason=result.breach, limit_breach=result.breach
                )
                return result.samples(0.0)
            budget = ArtifactBudget(spent=file_size(result.agent_log))
            diff = await self._diff(job, sb, base_commit)
            if diff is None:
                return result.samples(0.0)
            # Only the diff crosses over to grading. The agent sandbox is released meanwhile;
            # the stack waits for that before the rollout returns.
            closing = asyncio.ensure_future(self._release(sb, job))
            stack.push_async_callback(asyncio.wait, [closing])
            budget.write(job.art, "diff.patch", diff.data)
            job.record.set(artifacts=self._artifacts(job.art, result))
            graded = await self._grade(job, diff, ahead)
        budget.write(job.art, "test_log.txt", graded.test_log)
        return self._score(job, result, diff, graded)

    async def _grading_ahead(
        self, job: Job, stack: contextlib.AsyncExitStack
    ) -> GradingSandbox | None:
        """Grading needs the diff only after its set-up: its sandbox is created and prepared
        from the image alone while the agent works, and destroyed on every path."""
        if not self._grade_ahead:
            return None
        return await stack.enter_async_context(
            GradingSandbox(
                job.row,
                backend=self.config.backend,
                sandbox_options=self.config.sandbox_options,
                defences=self._defences,
                source=source_for(self.grading_supply, job.row) if self.grading_supply else None,
            )
        )

    async def _agent_sandbox(
        self, job: Job, stack: contextlib.AsyncExitStack
    ) -> tuple[Sandbox, str]:
        """The agent's sandbox (from :attr:`sandboxes`), the act attached, the workspace set up;
        returns it with the base commit. Released on every path."""
        row, timings = job.row, job.timings
        with timings.phase("sandbox_s"):
            with timings.step("agent_sandbox_create"):
                base_commit: str | None = None
                if self.supply is not None and self.supply.active:
                    # Prepared ahead (workspace set up, CLI installed, no session key).
                    sb, base_commit = await self.supply.obtain(row)
                    job.prepared.append(sb)
                    job.record.set(sandbox_source=self.supply.source(sb))
                    stack.push_async_callback(self._release, sb, job)
                else:
                    options = await self.act.sandbox_options(row)
                    try:
                        sb = await self.sandboxes.acquire(self.config.backend, row.image, options)
                    except SandboxError as e:
                        self.act.sandbox_failed(e)
                        raise InfraFailure(f"sandbox: {e}", stage="sandbox") from e
                    stack.push_async_callback(self._release, sb, job)
            job.record.isolation["limits"] = sb.limits.as_dict() if sb.limits else None
            await self.act.attach(job, sb, stack)
            if base_commit is None:
                with timings.step("workspace"):
                    async with boundary(
                        InfraFailure, "workspace", stage="workspace", passes=(SandboxError,)
                    ):
                        base_commit = await prepare_agent_workspace(sb, row)
        return sb, base_commit

    @staticmethod
    async def _agent_cpu(job: Job, sb: Sandbox, cpu0: float | None) -> None:
        """Record the agent sandbox's CPU seconds since ``cpu0`` (not when either is unknown,
        e.g. the sandbox was destroyed for a limit)."""
        if cpu0 is None:
            return
        try:
            cpu1 = await sb.cpu_seconds()
        except (SandboxError, OSError):  # e.g. destroyed for a limit: its group is gone
            return
        if cpu1 is not None:
            job.record.set(agent_cpu_s=round(cpu1 - cpu0, 3))

    async def _diff(self, job: Job, sb: Sandbox, base_commit: str) -> Diff | None:
        """The agent's diff; None (recorded as the model's failure) when it cannot be graded."""
        with job.timings.phase("diff_s"):
            try:
                diff = await capture_diff(sb, job.row.workdir, base_commit=base_commit)
            except DiffCaptureError as e:  # e.g. the agent deleted .git: its own doing
                job.record.set(failure_kind="model", fail_reason=f"diff: {e}")
                return None
        if diff.truncated_reason:  # never graded as an empty diff
            job.record.set(failure_kind="model", fail_reason=diff.truncated_reason)
            job.record.set(diff_truncated=diff.truncated_reason)
            return None
        return diff

    async def _grade(self, job: Job, diff: Diff, ahead: GradingSandbox | None) -> GradeResult:
        cfg, timings = self.config, job.timings
        with timings.phase("grade_s"):
            t_grade = time.monotonic()
            result = await grade(
                job.row,
                diff.text,
                backend=cfg.backend,
                sandbox_options=cfg.sandbox_options,
                timeout=cfg.eval_timeout_s,
                sandbox=ahead,
                defences=self._defences,
            )
        if ahead is not None:
            sb = ahead.sandbox
            if result.reward < 1.0 and sb is not None and (hit := await sb.limit_breaches()):
                result.reason = f"{result.reason} (grading sandbox: {'; '.join(hit)})"
            with timings.phase("grade_s"), timings.step("grading_sandbox_destroy"):
                failed = job.record.extra.setdefault("teardown_failures", [])
                await guarded("grading_sandbox", ahead.close, failed, job.sid)
            if ahead.ready_at is not None:
                timings.steps["grading_prepare"] = ahead.prepare_s or 0.0
                timings.steps["grading_wait"] = max(0.0, ahead.ready_at - t_grade)
        return result

    def _score(self, job: Job, result: ActResult, diff: Diff, graded: GradeResult) -> list[Sample]:
        record = job.record
        record.set(
            reward=graded.reward, **graded.record_fields(), diff_truncated=diff.truncated_reason
        )
        if graded.failure_kind == "infra":
            raise InfraFailure(f"grading: {graded.reason}", stage="grading")
        record.failure_kind = graded.failure_kind if graded.reward < 1.0 else None
        if graded.reward < 1.0:
            record.abort_reason = None
            record.set(fail_reason=graded.reason)
        return result.samples(graded.reward)

    # ---- helpers ---------------------------------------------------------------------------------

    @property
    def _defences(self) -> Defences:
        return Defences(
            tamper_policy=self.config.tamper_policy,
            twin=self.config.twin_grade,
            tamper_reward=self.config.tamper_reward,
        )

    @property
    def _grade_ahead(self) -> bool:
        ahead = self.config.grade_ahead
        return ahead if ahead is not None else BACKENDS.load(self.config.backend).idle_is_free

    async def _release(self, sb: Sandbox, job: Job) -> None:
        """The agent sandbox back to :attr:`sandboxes` (once; later calls are no-ops)."""
        if sb in job.released:
            return
        job.released.append(sb)
        with job.timings.step("agent_sandbox_destroy"):
            failed = job.record.extra.setdefault("teardown_failures", [])
            # A prepared sandbox is its supply's: closing it tells the supply (a copy's snapshot).
            release = sb.close if sb in job.prepared else lambda: self.sandboxes.release(sb)
            await guarded("agent_sandbox", release, failed, job.sid)

    def _abort(
        self,
        base: Sample,
        record: RolloutRecord,
        reason: str,
        kind: FailureKind,
        stage: str | None,
    ) -> list[Sample]:
        record.set(failure_kind=kind, abort_reason=reason, reward=0.0, infra_stage=stage)
        record.extra.setdefault("num_segments", 0)
        return [aborted_sample(base, reason, kind, instance_id=record.instance_id)]

    def _artifact_dir(self, row: TaskRow, base: Sample) -> pathlib.Path | None:
        if self.config.out_dir is None:
            return None
        d = self.config.out_dir / "rollouts" / f"{row.instance_id}__{base.index}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _artifacts(self, art: pathlib.Path | None, result: ActResult) -> dict[str, str]:
        if art is None or self.config.out_dir is None:
            return {}
        root = self.config.out_dir
        out = {"diff": str((art / "diff.patch").relative_to(root))}
        if result.agent_log:
            out["agent_log"] = str(pathlib.Path(result.agent_log).relative_to(root))
        out["test_log"] = str((art / "test_log.txt").relative_to(root))
        return out

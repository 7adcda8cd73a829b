"""One rollout: adapter session -> agent sandbox -> diff -> clean-sandbox grading -> Samples.

Failure policy (``failure_kind``). Once the agent has started, it controls its sandbox (files,
processes, and any request it sends to the adapter with its own key), so a failure is ``infra``
only on evidence it cannot produce:

* ``infra`` (with ``infra_stage``) — our engine or sandbox API failing our call (``sandbox``),
  the sandbox's creation or the task's set-up failing (``sandbox`` / ``workspace``), the agent
  CLI's install (``install``), the policy server failing in a way a health probe confirms
  (``policy``: the adapter records only such errors as evidence), the CLI never reaching the
  model at all (``agent``: no turn recorded, so the model never acted), grading that could not run
  (``grading``: see grade.py, whose control runs settle ambiguous cases in a fresh sandbox), the
  rollout deadline (``deadline``), or a bug of ours (``internal``). The rollout returns one
  aborted placeholder (``remove_sample=True``) and is retried within ``infra_retries``.
* ``model`` — everything else: a diff that does not apply or is over a cap, tests that fail,
  tampering, a budget overrun, an adapter request the agent malformed, a log or marker the agent
  mangled (reading agent-writable paths is best-effort and never infra; the run directory and
  its markers are root's: harness/launch.py), a resource limit of its sandbox hit while it
  worked (memory, pids, disk: the rollout ends at once, ``fail_reason`` names the limit). The
  samples are kept for training with reward 0.
* ``aborted`` — the trainer aborted its engines mid-rollout (the policy server answered a
  request with ``finish_reason: abort``; slime does this at the end of a rollout step). The CLI is
  stopped at once, the sandboxes are destroyed, and the rollout returns one aborted placeholder
  (``remove_sample=True``); it is not retried. A trainer that *cancels* the rollout's task instead
  gets the same teardown (sandboxes destroyed before the cancellation completes).

Artifacts (diff, agent log, test log) are written under a per-rollout byte budget.

Isolation (``rollout/isolation.py``): the agent sandbox reaches only the adapter by default;
``record["isolation"]`` says what the agent and the grader could reach and which limits applied.

The agent's side (its sandbox, workspace, the watched CLI run) is :mod:`agent`; the record is
:mod:`record` (:class:`~coding_agent_rl.rollout.record.RolloutRecord`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import pathlib
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.adapter.pool import AdapterPool
from coding_agent_rl.adapter.replay import ReplayPlan
from coding_agent_rl.adapter.server import AdapterServer
from coding_agent_rl.adapter.sessions import new_session_id
from coding_agent_rl.datasets.prompt import render_prompt
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import (
    FailureKind,
    InfraFailure,
    RolloutAborted,
    SandboxError,
    boundary,
)
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.diff import DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox, grading_network
from coding_agent_rl.harness import AgentRun, BaseHarness, HarnessContext
from coding_agent_rl.rollout.agent import AgentPhase, settle
from coding_agent_rl.rollout.attribution import ArtifactBudget, check_agent, file_size
from coding_agent_rl.rollout.config import RolloutConfig, RolloutOutcome
from coding_agent_rl.rollout.isolation import AgentNetwork, agent_network_mode
from coding_agent_rl.rollout.record import RolloutRecord, event
from coding_agent_rl.rollout.samples import rollout_samples
from coding_agent_rl.rollout.timing import Timings
from coding_agent_rl.sandbox import BACKENDS, Sandbox
from coding_agent_rl.trajectory.turn import Turn
from coding_agent_rl.types import Sample, aborted_sample

log = logging.getLogger(__name__)

# Called with (session_id, row) once the adapter session is open, e.g. to hand the replay
# policy the task's gold patch.
SessionHook = Callable[[str, Any], Awaitable[None]]


@dataclasses.dataclass
class BranchTap:
    """A tree rollout's hook into :meth:`RolloutRunner.run` (rollout/branch.py): the recorded
    turns its first requests replay (a branch), and its own turns, kept when it ends."""

    replay: ReplayPlan | None = None
    turns: list[Turn] = dataclasses.field(default_factory=list)


_TAP: contextvars.ContextVar[BranchTap | None] = contextvars.ContextVar("branch_tap", default=None)


class RolloutRunner:
    """Runs rollouts against one adapter and one harness; safe to use concurrently."""

    def __init__(
        self,
        *,
        adapter: AdapterServer | AdapterPool | None,
        adapter_url: str,
        harness: BaseHarness | None,
        config: RolloutConfig,
        decode: Callable[[list[int]], str] | None = None,
        on_session_open: SessionHook | None = None,
        run_id: str | None = None,
        network: AgentNetwork | None = None,
        node: str | None = None,
        url_for: Callable[[str], str] | None = None,
    ):
        """``adapter_url``: the adapter as the agent sandbox sees it (``network.public_url``);
        ``url_for(sid)`` instead, where each session has its own (an ``AdapterPool``'s process).
        ``adapter`` and ``harness`` are None for a runner without an agent CLI (native)."""
        self._adapter = adapter
        self.adapter_url = adapter_url
        self.url_for = url_for or (lambda _sid: adapter_url)
        self.harness = harness
        self.config = config
        self.network = network or AgentNetwork(
            agent_network_mode(config.agent_network), config.backend
        )
        self.decode = decode
        self.on_session_open = on_session_open
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.node = node or socket.gethostname()  # each record's ``node``
        self.agent = AgentPhase(config, harness, self.network)

    @property
    def adapter(self) -> AdapterServer | AdapterPool:
        assert self._adapter is not None, "this runner has no adapter"
        return self._adapter

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
            token = _TAP.set(tap)
            try:
                outcome = await self._attempt(row, base, attempt, sampling_params, evaluation)
            finally:
                _TAP.reset(token)
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
        sid, timings, record, art = self._begin(row, base, attempt)
        tap = _TAP.get()
        # The trainer's sampling params win over what the CLI asks for (its max_tokens,
        # temperature): the tokens are trained as sampled under them; max_new_tokens is a cap.
        # The trainer's session id (slime: a uuid per sample) routes every turn to one engine.
        self.adapter.sessions.open(
            sid,
            sampling_fixed=sampling_params,
            max_turns=self.config.max_turns,
            metadata={"routing_key": base.session_id} if base.session_id else None,
            replay=tap.replay if tap is not None else None,
        )
        try:
            samples = await self._guarded(
                self._pipeline(row, base, sid, record, timings, art, evaluation), base, record
            )
        finally:
            with contextlib.suppress(Exception):
                if tap is not None:  # a tree rollout keeps its turns (rollout/branch.py)
                    tap.turns = self.adapter.sessions.turns(sid)
                self.adapter.sessions.close(sid)
                self.adapter.sessions.pop(sid)
                self.adapter.engine.forget(sid)
        return self._end(sid, samples, record, timings)

    async def _guarded(
        self, work: Awaitable[list[Sample]], base: Sample, record: RolloutRecord
    ) -> list[Sample]:
        """``work`` within the rollout deadline; a failure becomes the aborted placeholder."""
        try:
            return await asyncio.wait_for(work, self.config.deadline)
        except RolloutAborted as e:
            return self._abort(base, record, str(e), "aborted", None)
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
        self, row: TaskRow, base: Sample, attempt: int
    ) -> tuple[str, Timings, RolloutRecord, pathlib.Path | None]:
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
        return sid, Timings(), record, self._artifact_dir(row, base)

    def _end(
        self, sid: str, samples: list[Sample], record: RolloutRecord, timings: Timings
    ) -> RolloutOutcome:
        record.set(timings=timings.as_dict(), profile=timings.profile())
        event(
            "end",
            sid,
            reward=record.reward,
            failure_kind=record.failure_kind,
            reason=record.abort_reason or record.get("fail_reason"),
            turns=record.get("turns"),
            total_s=record.get("timings")["total_s"],
        )
        return RolloutOutcome(samples, record.as_dict())

    async def _pipeline(
        self,
        row: TaskRow,
        base: Sample,
        sid: str,
        record: RolloutRecord,
        timings: Timings,
        art: pathlib.Path | None,
        evaluation: bool,
    ) -> list[Sample]:
        cfg = self.config
        assert self.harness is not None
        if self.on_session_open is not None:
            with timings.step("session_open"):
                await self.on_session_open(sid, row)
        async with contextlib.AsyncExitStack() as stack:
            # Grading needs the diff only after its set-up: its sandbox is created and prepared
            # from the image alone while the agent works, and destroyed on every path.
            ahead = None
            if self._grade_ahead:
                ahead = await stack.enter_async_context(
                    GradingSandbox(
                        row,
                        backend=cfg.backend,
                        sandbox_options=cfg.sandbox_options,
                        defences=self._defences,
                    )
                )
            with timings.phase("sandbox_s"):
                with timings.step("agent_sandbox_create"):
                    sb = await self.agent.create_sandbox(row)
                stack.push_async_callback(sb.close)
                with timings.step("adapter_attach"):
                    stop_listener = await self.network.attach(
                        sb, self.adapter, self.url_for(sid), sid
                    )
                if stop_listener is not None:
                    stack.push_async_callback(stop_listener)
                record.isolation["limits"] = sb.limits.as_dict() if sb.limits else None
                # The CLI's install (usually a cached check) touches nothing the workspace set-up
                # does: it runs alongside; install_s counts only what it adds after.
                installing = asyncio.ensure_future(self.harness.install(sb))
                stack.push_async_callback(settle, installing)
                with timings.step("workspace"):
                    base_commit = await self.agent.prepare_repo(sb, row)
            with timings.phase("install_s"):
                ctx = HarnessContext(
                    adapter_url=self.url_for(sid),
                    session_id=sid,
                    model=cfg.model_name,
                    workdir=row.workdir,
                    log_dir=art,
                )
                async with boundary(
                    InfraFailure, "agent install", stage="install", passes=(SandboxError,)
                ):
                    with timings.step("install_wait"):
                        await installing
                    with timings.step("configure"):
                        await self.harness.configure(sb, ctx)
            if ahead is not None:
                # While the agent works (mostly waiting on the policy), not while its sandbox is
                # set up: that is on the critical path, the agent's model turns usually are not.
                ahead.start()
            with timings.phase("agent_s"):
                prompt = render_prompt(row.problem_statement, row.workdir, cfg.prompt_template)
                agent, breach = await self.agent.run(sb, ctx, prompt, sid, self.adapter.engine)
            if breach is not None:  # the agent's own doing: the rollout ends here
                event("limit", sid, breach=breach)
                record.set(failure_kind="model", fail_reason=breach, limit_breach=breach)
                await self.adapter.sessions.settled(sid, timeout=10.0)
                turns = self.adapter.sessions.turns(sid)
                return rollout_samples(
                    self.config, self.decode, row, base, sid, turns, record, 0.0, evaluation
                )
            assert agent is not None
            record.agent_exit_code = agent.exit_code
            record.agent_timed_out = agent.timed_out
            timings.steps["agent_cli"] = agent.duration_s
            with timings.step("settled"):
                await self.adapter.sessions.settled(sid, timeout=10.0)
            turns = self.adapter.sessions.turns(sid)
            event(
                "agent_done",
                sid,
                exit_code=agent.exit_code,
                timed_out=agent.timed_out,
                turns=len(turns),
                agent_s=round(agent.duration_s, 3),
            )
            check_agent(self.adapter.sessions.errors(sid), agent, turns, record)
            budget = ArtifactBudget(spent=file_size(agent.host_log_path))
            with timings.phase("diff_s"):
                try:
                    diff = await capture_diff(sb, row.workdir, base_commit=base_commit)
                except DiffCaptureError as e:  # e.g. the agent deleted .git: its own doing
                    record.set(failure_kind="model", fail_reason=f"diff: {e}")
                    return rollout_samples(
                        self.config, self.decode, row, base, sid, turns, record, 0.0, evaluation
                    )
            if diff.truncated_reason:  # never graded as an empty diff
                record.set(failure_kind="model", fail_reason=diff.truncated_reason)
                record.set(diff_truncated=diff.truncated_reason)
                return rollout_samples(
                    self.config, self.decode, row, base, sid, turns, record, 0.0, evaluation
                )
            # Only the diff crosses over to grading. The agent sandbox is destroyed meanwhile;
            # the stack waits for that before the rollout returns.
            closing = asyncio.ensure_future(self._close_timed(sb, timings))
            stack.push_async_callback(asyncio.wait, [closing])
            budget.write(art, "diff.patch", diff.data)
            record.set(artifacts=self._artifacts(art, agent))
            with timings.phase("grade_s"):
                t_grade = time.monotonic()
                result = await grade(
                    row,
                    diff.text,
                    backend=cfg.backend,
                    sandbox_options=cfg.sandbox_options,
                    timeout=cfg.eval_timeout_s,
                    sandbox=ahead,
                    defences=self._defences,
                )
            if ahead is not None:
                if result.reward < 1.0 and (hit := await ahead.sandbox.limit_breaches()):
                    result.reason = f"{result.reason} (grading sandbox: {'; '.join(hit)})"
                with timings.phase("grade_s"), timings.step("grading_sandbox_destroy"):
                    await ahead.close()
                if ahead.ready_at is not None:
                    timings.steps["grading_prepare"] = ahead.prepare_s or 0.0
                    timings.steps["grading_wait"] = max(0.0, ahead.ready_at - t_grade)
        budget.write(art, "test_log.txt", result.test_log)
        record.set(
            reward=result.reward, **result.record_fields(), diff_truncated=diff.truncated_reason
        )
        if result.failure_kind == "infra":
            raise InfraFailure(f"grading: {result.reason}", stage="grading")
        record.failure_kind = result.failure_kind if result.reward < 1.0 else None
        if result.reward < 1.0:
            record.abort_reason = None
            record.set(fail_reason=result.reason)
        return rollout_samples(
            self.config, self.decode, row, base, sid, turns, record, result.reward, evaluation
        )

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

    @staticmethod
    async def _close_timed(sb: Sandbox, timings: Timings) -> None:
        with timings.step("agent_sandbox_destroy"):
            await sb.close()

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

    def _artifacts(self, art: pathlib.Path | None, agent: AgentRun) -> dict[str, str]:
        if art is None or self.config.out_dir is None:
            return {}
        root = self.config.out_dir
        out = {"diff": str((art / "diff.patch").relative_to(root))}
        if agent.host_log_path:
            out["agent_log"] = str(pathlib.Path(agent.host_log_path).relative_to(root))
        out["test_log"] = str((art / "test_log.txt").relative_to(root))
        return out

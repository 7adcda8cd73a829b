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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import pathlib
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from coding_agent_rl.adapter.sessions import new_session_id
from coding_agent_rl.datasets.prompt import render_prompt
from coding_agent_rl.grading.defences import Defences
from coding_agent_rl.grading.diff import DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox, grading_network
from coding_agent_rl.grading.workspace import prepare_agent_workspace
from coding_agent_rl.harness import HarnessContext
from coding_agent_rl.harness.launch import RUN_ROOT
from coding_agent_rl.rollout.attribution import (
    ArtifactBudget,
    InfraFailure,
    check_agent,
    file_size,
)
from coding_agent_rl.rollout.config import RolloutConfig, RolloutOutcome
from coding_agent_rl.rollout.isolation import AgentNetwork, agent_network_mode
from coding_agent_rl.rollout.timing import Timings
from coding_agent_rl.sandbox import BACKENDS, SandboxError, create_sandbox
from coding_agent_rl.sandbox.task import task_options
from coding_agent_rl.trajectory import build_samples
from coding_agent_rl.types import Sample, Status, aborted_sample

log = logging.getLogger(__name__)


async def _settle(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` unless it is done, wait for it, and mark its outcome as seen."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


class RolloutAborted(Exception):
    """The trainer aborted the policy server's requests: the rollout ends, unretried."""


ABORT_POLL_S = 0.05  # how often the agent phase checks whether its session was aborted


def event(name: str, sid: str, **fields: Any) -> None:
    """One structured log line per rollout event: ``rollout.<name> sid=... {json fields}``."""
    log.info("rollout.%s sid=%s %s", name, sid, json.dumps(fields, default=str, sort_keys=True))


# Called with (session_id, row) once the adapter session is open, e.g. to hand the replay
# policy the task's gold patch.
SessionHook = Callable[[str, Any], Awaitable[None]]


class RolloutRunner:
    """Runs rollouts against one adapter and one harness; safe to use concurrently."""

    def __init__(
        self,
        *,
        adapter: Any,
        adapter_url: str,
        harness: Any,
        config: RolloutConfig,
        decode: Callable[[list[int]], str] | None = None,
        on_session_open: SessionHook | None = None,
        run_id: str | None = None,
        network: AgentNetwork | None = None,
    ):
        """``adapter_url``: the adapter as the agent sandbox sees it (``network.public_url``)."""
        self.adapter = adapter
        self.adapter_url = adapter_url
        self.harness = harness
        self.config = config
        self.network = network or AgentNetwork(
            agent_network_mode(config.agent_network), config.backend
        )
        self.decode = decode
        self.on_session_open = on_session_open
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self._mounts: dict[str, str] | None = None  # host file -> sandbox path, once known
        self._mounts_task: asyncio.Future[dict[str, str]] | None = None

    async def run(
        self,
        row: Any,
        base: Sample,
        *,
        sampling_params: dict[str, Any] | None = None,
        evaluation: bool = False,
    ) -> RolloutOutcome:
        """Never raises for a per-rollout failure (cancellation still propagates)."""
        attempts = self.config.infra_retries + 1
        outcome: RolloutOutcome | None = None
        for attempt in range(attempts):
            outcome = await self._attempt(row, base, attempt, sampling_params, evaluation)
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
        row: Any,
        base: Sample,
        attempt: int,
        sampling_params: dict[str, Any] | None,
        evaluation: bool,
    ) -> RolloutOutcome:
        sid, timings, record, art = self._begin(row, base, attempt)
        # The trainer's sampling params win over what the CLI asks for (its max_tokens,
        # temperature): the tokens are trained as sampled under them; max_new_tokens is a cap.
        # The trainer's session id (slime: a uuid per sample) routes every turn to one engine.
        self.adapter.sessions.open(
            sid,
            sampling_fixed=sampling_params,
            max_turns=self.config.max_turns,
            metadata={"routing_key": base.session_id} if base.session_id else None,
        )
        try:
            samples = await self._guarded(
                self._pipeline(row, base, sid, record, timings, art, evaluation), base, record
            )
        finally:
            with contextlib.suppress(Exception):
                self.adapter.sessions.close(sid)
                self.adapter.sessions.pop(sid)
                self.adapter.engine.forget(sid)
        return self._end(sid, samples, record, timings)

    async def _guarded(
        self, work: Awaitable[list[Sample]], base: Sample, record: dict[str, Any]
    ) -> list[Sample]:
        """``work`` within the rollout deadline; a failure becomes the aborted placeholder."""
        try:
            return await asyncio.wait_for(work, self.config.deadline)
        except RolloutAborted as e:
            return self._abort(base, record, str(e), "aborted", None)
        except InfraFailure as e:
            return self._abort(base, record, f"{type(e).__name__}: {e}", "infra", e.stage)
        except SandboxError as e:  # our engine / sandbox API failed our call
            return self._abort(base, record, f"{type(e).__name__}: {e}", "infra", "sandbox")
        except asyncio.TimeoutError:
            reason = f"rollout deadline {self.config.deadline:.0f}s"
            return self._abort(base, record, reason, "infra", "deadline")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug must cost one rollout, not the batch
            log.exception("rollout %s crashed", record["session_id"])
            reason = f"internal error: {type(e).__name__}: {e}"
            return self._abort(base, record, reason, "infra", "internal")

    def _begin(
        self, row: Any, base: Sample, attempt: int
    ) -> tuple[str, Timings, dict[str, Any], pathlib.Path | None]:
        """An attempt's session id, timings, ``results.jsonl`` record and artifact folder."""
        # The id is the agent's API key too: 128 random bits (adapter/sessions.py).
        sid = new_session_id(f"{self.run_id}-{row.instance_id}-{base.index}-{attempt}-")
        record: dict[str, Any] = {
            "rollout_id": base.rollout_id if base.rollout_id is not None else base.index,
            "instance_id": row.instance_id,
            "sample_index": base.index,
            "group_index": base.group_index,
            "session_id": sid,
            "reward": 0.0,
            "failure_kind": None,
            "abort_reason": None,
            "agent_exit_code": None,
            "agent_timed_out": None,
            "isolation": {
                "agent_network": self.network.mode,
                "grading_network": grading_network(self.config.backend),
            },
        }
        if base.session_id:
            record["routing_key"] = base.session_id
        event("start", sid, instance_id=row.instance_id, index=base.index, attempt=attempt)
        return sid, Timings(), record, self._artifact_dir(row, base)

    def _end(
        self, sid: str, samples: list[Sample], record: dict[str, Any], timings: Timings
    ) -> RolloutOutcome:
        record["timings"] = timings.as_dict()
        record["profile"] = timings.profile()
        event(
            "end",
            sid,
            reward=record["reward"],
            failure_kind=record["failure_kind"],
            reason=record["abort_reason"] or record.get("fail_reason"),
            turns=record.get("turns"),
            total_s=record["timings"]["total_s"],
        )
        return RolloutOutcome(samples, record)

    async def _pipeline(
        self,
        row: Any,
        base: Sample,
        sid: str,
        record: dict[str, Any],
        timings: Timings,
        art: pathlib.Path | None,
        evaluation: bool,
    ) -> list[Sample]:
        cfg = self.config
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
                    sb = await self._create_agent_sandbox(row)
                stack.push_async_callback(sb.close)
                with timings.step("adapter_attach"):
                    stop_listener = await self.network.attach(
                        sb, self.adapter, self.adapter_url, sid
                    )
                if stop_listener is not None:
                    stack.push_async_callback(stop_listener)
                record["isolation"]["limits"] = sb.limits.as_dict() if sb.limits else None
                # The CLI's install (usually a cached check) touches nothing the workspace set-up
                # does: it runs alongside; install_s counts only what it adds after.
                installing = asyncio.ensure_future(self.harness.install(sb))
                stack.push_async_callback(_settle, installing)
                with timings.step("workspace"):
                    base_commit = await self._prepare_repo(sb, row)
            with timings.phase("install_s"):
                ctx = HarnessContext(
                    adapter_url=self.adapter_url,
                    session_id=sid,
                    model=cfg.model_name,
                    workdir=row.workdir,
                    log_dir=art,
                )
                try:
                    with timings.step("install_wait"):
                        await installing
                    with timings.step("configure"):
                        await self.harness.configure(sb, ctx)
                except SandboxError:
                    raise
                except Exception as e:
                    raise InfraFailure(f"agent install: {e}", stage="install") from e
            if ahead is not None:
                # While the agent works (mostly waiting on the policy), not while its sandbox is
                # set up: that is on the critical path, the agent's model turns usually are not.
                ahead.start()
            with timings.phase("agent_s"):
                prompt = render_prompt(row.problem_statement, row.workdir, cfg.prompt_template)
                agent, breach = await self._run_agent(sb, ctx, prompt, sid)
            if breach is not None:  # the agent's own doing: the rollout ends here
                event("limit", sid, breach=breach)
                record.update(failure_kind="model", fail_reason=breach, limit_breach=breach)
                await self.adapter.sessions.settled(sid, timeout=10.0)
                turns = self.adapter.sessions.turns(sid)
                return self._samples(row, base, sid, turns, record, 0.0, evaluation)
            assert agent is not None
            record["agent_exit_code"] = agent.exit_code
            record["agent_timed_out"] = agent.timed_out
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
                    record.update(failure_kind="model", fail_reason=f"diff: {e}")
                    return self._samples(row, base, sid, turns, record, 0.0, evaluation)
            if diff.truncated_reason:  # never graded as an empty diff
                record.update(failure_kind="model", fail_reason=diff.truncated_reason)
                record.update(diff_truncated=diff.truncated_reason)
                return self._samples(row, base, sid, turns, record, 0.0, evaluation)
            # Only the diff crosses over to grading. The agent sandbox is destroyed meanwhile;
            # the stack waits for that before the rollout returns.
            closing = asyncio.ensure_future(self._close_timed(sb, timings))
            stack.push_async_callback(asyncio.wait, [closing])
            budget.write(art, "diff.patch", diff.data)
            record["artifacts"] = self._artifacts(art, agent)
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
        record.update(
            reward=result.reward, **result.record_fields(), diff_truncated=diff.truncated_reason
        )
        if result.failure_kind == "infra":
            raise InfraFailure(f"grading: {result.reason}", stage="grading")
        record["failure_kind"] = result.failure_kind if result.reward < 1.0 else None
        if result.reward < 1.0:
            record["abort_reason"] = None
            record["fail_reason"] = result.reason
        return self._samples(row, base, sid, turns, record, result.reward, evaluation)

    async def _run_agent(
        self, sb: Any, ctx: HarnessContext, prompt: str, sid: str
    ) -> tuple[Any, str | None]:
        """The CLI's run within its budget: ``(run, None)``, or ``(None, the limit it hit)``.

        Watched while it runs for the policy server aborting a request of ``sid`` (raises
        :class:`RolloutAborted`; cancelling the run kills the CLI's processes) and, every
        ``limits_poll_s`` and once after, for a resource limit of its sandbox: a breach destroys
        the sandbox at once (after a fork bomb not even a kill command can start in it)."""
        run = asyncio.ensure_future(self.harness.run(sb, ctx, prompt, self.config.agent_budget_s))
        watch = asyncio.ensure_future(self._watch_limits(sb))
        try:
            while not run.done():
                if (reason := self.adapter.engine.aborted(sid)) is not None:
                    raise RolloutAborted(reason)
                await asyncio.wait(
                    {run, watch}, timeout=ABORT_POLL_S, return_when=asyncio.FIRST_COMPLETED
                )
                if watch.done():
                    breach = watch.result()
                    await sb.close()
                    return None, breach
            try:
                agent = run.result()
            except SandboxError:  # gone: a limit that killed the sandbox is the model's
                if hit := await sb.limit_breaches():
                    return None, "; ".join(hit)
                raise
            if (reason := self.adapter.engine.aborted(sid)) is not None:
                raise RolloutAborted(reason)  # the CLI may have exited on the refusal
            hit = await sb.limit_breaches()
            return (None, "; ".join(hit)) if hit else (agent, None)
        finally:
            await _settle(watch)
            await _settle(run)

    async def _watch_limits(self, sb: Any) -> str:
        while True:
            await asyncio.sleep(self.config.limits_poll_s)
            if hit := await sb.limit_breaches():
                return "; ".join(hit)

    @property
    def _defences(self) -> Defences:
        return Defences(tamper_policy=self.config.tamper_policy)

    @property
    def _grade_ahead(self) -> bool:
        ahead = self.config.grade_ahead
        return ahead if ahead is not None else BACKENDS.load(self.config.backend).idle_is_free

    async def _create_agent_sandbox(self, row: Any) -> Any:
        """The agent's sandbox, with the harness's host files mounted where the backend can."""
        cfg = self.config
        mounts = await self._agent_mounts()
        opts = task_options(
            cfg.backend,
            {**cfg.sandbox_options, **self.network.options()},
            resources=row.resources,
            writable=[row.workdir, RUN_ROOT],
        )
        if mounts:
            opts["mounts"] = {**(opts.get("mounts") or {}), **mounts}
        sb = create_sandbox(cfg.backend, row.image, **opts)
        try:
            await sb.__aenter__()  # destroys what it created when it fails or is cancelled
        except SandboxError as e:
            if mounts and "mount" in str(e).lower():
                log.warning("cannot mount the agent CLI (%s); uploading it from now on", e)
                self._mounts = {}
            raise InfraFailure(f"sandbox: {e}", stage="sandbox") from e
        return sb

    async def _agent_mounts(self) -> dict[str, str]:
        """Host files the harness wants in the agent sandbox (``harness.host_mounts()``), where
        the backend can bind-mount host files: read-only instead of uploaded into every
        sandbox. Computed once (the first call may fetch and unpack the CLI)."""
        cfg = self.config
        if self.harness is None or not cfg.mount_agent:
            return {}
        host_mounts = self.harness.host_mounts
        if self._mounts is None and BACKENDS.load(cfg.backend).supports_bind_mounts():
            if self._mounts_task is None or self._mounts_task.get_loop() is not (
                asyncio.get_running_loop()
            ):
                self._mounts_task = asyncio.ensure_future(asyncio.to_thread(host_mounts))
            try:
                self._mounts = await asyncio.shield(self._mounts_task)
            except Exception as e:  # the install step reports it (and uploads, where it can)
                log.warning("agent CLI not mountable (%s); uploading it per sandbox", e)
                self._mounts = {}
        return self._mounts or {}

    @staticmethod
    async def _close_timed(sb: Any, timings: Timings) -> None:
        with timings.step("agent_sandbox_destroy"):
            await sb.close()

    async def _prepare_repo(self, sb: Any, row: Any) -> str:
        """Run the row's set-up, hide the future from git; returns the base commit id."""
        try:
            return await prepare_agent_workspace(sb, row)
        except SandboxError:
            raise
        except Exception as e:  # the task's own set-up failed: not the model's doing
            raise InfraFailure(f"workspace: {e}", stage="workspace") from e

    def _samples(
        self,
        row: Any,
        base: Sample,
        sid: str,
        turns: list[Any],
        record: dict[str, Any],
        reward: float,
        evaluation: bool,
    ) -> list[Sample]:
        base = dataclasses.replace(
            base,
            session_id=base.session_id or sid,
            metadata={
                **base.metadata,
                "instance_id": row.instance_id,
                "failure_kind": record["failure_kind"],
                **({"limit_breach": record["limit_breach"]} if "limit_breach" in record else {}),
            },
        )
        samples = build_samples(
            turns,
            base,
            reward=reward,
            reward_mode=self.config.reward_mode,
            max_context=self.config.max_context,
            max_response=self.config.max_response,
            decode=self.decode,
        )
        trained = sum(sum(s.loss_mask or []) for s in samples)
        record.update(
            num_segments=len(samples),
            turns=len(turns),
            metrics={
                "tokens_generated": sum(len(t.output_ids) for t in turns),
                "tokens_trained": trained,
                "truncated": sum(s.status == Status.TRUNCATED for s in samples),
                "truncation_reason": next(
                    (
                        s.metadata.get("truncation_reason") or "length"
                        for s in samples
                        if s.status == Status.TRUNCATED
                    ),
                    None,
                ),
            },
        )
        if evaluation:
            # slime's eval path wants one scored sample per prompt.
            final = samples[-1] if samples else base
            return [dataclasses.replace(final, reward=reward)]
        if not samples:
            raise InfraFailure(
                "no trainable sample (no sampled token survived the context budget)",
                stage="internal",
            )
        return samples

    def _abort(
        self, base: Sample, record: dict[str, Any], reason: str, kind: str, stage: str | None
    ) -> list[Sample]:
        record.update(failure_kind=kind, abort_reason=reason, reward=0.0, infra_stage=stage)
        record.setdefault("num_segments", 0)
        return [aborted_sample(base, reason, kind, instance_id=record["instance_id"])]

    def _artifact_dir(self, row: Any, base: Sample) -> pathlib.Path | None:
        if self.config.out_dir is None:
            return None
        d = self.config.out_dir / "rollouts" / f"{row.instance_id}__{base.index}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _artifacts(self, art: pathlib.Path | None, agent: Any) -> dict[str, str]:
        if art is None or self.config.out_dir is None:
            return {}
        root = self.config.out_dir
        out = {"diff": str((art / "diff.patch").relative_to(root))}
        if agent.host_log_path:
            out["agent_log"] = str(pathlib.Path(agent.host_log_path).relative_to(root))
        out["test_log"] = str((art / "test_log.txt").relative_to(root))
        return out

"""The CLI act: an agent CLI (a harness) in the sandbox, its model calls through the adapter."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from coding_agent_rl.adapter.pool import AdapterPool
from coding_agent_rl.adapter.server import AdapterServer
from coding_agent_rl.datasets.prompt import render_prompt
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import InfraFailure, SandboxError, boundary
from coding_agent_rl.harness import BaseHarness, HarnessContext
from coding_agent_rl.rollout.act import BRANCH_TAP, ActResult, Job, SessionHook
from coding_agent_rl.rollout.agent import AgentPhase, settle
from coding_agent_rl.rollout.attribution import check_agent
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.rollout.record import event
from coding_agent_rl.rollout.samples import rollout_samples
from coding_agent_rl.rollout.teardown import guarded
from coding_agent_rl.sandbox import Sandbox


class CliAct:
    """Runs a harness's CLI against one adapter; shared by a runner's rollouts."""

    def __init__(
        self,
        *,
        adapter: AdapterServer | AdapterPool,
        adapter_url: str,
        harness: BaseHarness,
        config: RolloutConfig,
        network: AgentNetwork,
        decode: Callable[[list[int]], str] | None = None,
        on_session_open: SessionHook | None = None,
        url_for: Callable[[str], str] | None = None,
    ):
        self.adapter = adapter
        self.adapter_url = adapter_url
        self.url_for = url_for or (lambda _sid: adapter_url)
        self.harness = harness
        self.config = config
        self.network = network
        self.decode = decode
        self.on_session_open = on_session_open
        self.agent = AgentPhase(config, harness, network)
        self._installing: dict[str, asyncio.Future[Any]] = {}

    @contextlib.asynccontextmanager
    async def session(self, job: Job) -> AsyncIterator[None]:
        # The trainer's sampling params win over what the CLI asks for (its max_tokens,
        # temperature): the tokens are trained as sampled under them; max_new_tokens is a cap.
        # The trainer's session id (slime: a uuid per sample) routes every turn to one engine.
        sid, sessions = job.sid, self.adapter.sessions
        tap = BRANCH_TAP.get()  # a tree rollout's (rollout/branch.py)
        sessions.open(
            sid,
            sampling_fixed=job.sampling_params,
            max_turns=self.config.max_turns,
            metadata={"routing_key": job.base.session_id} if job.base.session_id else None,
            replay=tap.replay if tap is not None else None,
        )
        try:
            yield
        finally:
            failed = job.record.extra.setdefault("teardown_failures", [])
            if tap is not None:  # a tree rollout keeps its turns

                def keep_turns() -> None:
                    tap.turns = sessions.turns(sid)

                await guarded("tree_turns", keep_turns, failed, sid)
            await guarded("adapter_session_close", lambda: sessions.close(sid), failed, sid)
            await guarded("adapter_session_pop", lambda: sessions.pop(sid), failed, sid)
            await guarded("engine_forget", lambda: self.adapter.engine.forget(sid), failed, sid)

    async def sandbox_options(self, row: TaskRow) -> dict[str, Any]:
        await self.agent.agent_mounts()
        return self.agent.sandbox_options(row)

    def sandbox_failed(self, error: Exception) -> None:
        self.agent.mount_failed(error)

    async def attach(self, job: Job, sb: Sandbox, stack: contextlib.AsyncExitStack) -> None:
        with job.timings.step("adapter_attach"):
            stop_listener = await self.network.attach(
                sb, self.adapter, self.url_for(job.sid), job.sid
            )
        if stop_listener is not None:
            stack.push_async_callback(stop_listener)
        # The CLI's install (usually a cached check) touches nothing the workspace set-up
        # does: it runs alongside; install_s counts only what it adds after.
        installing = asyncio.ensure_future(self.harness.install(sb))
        stack.push_async_callback(settle, installing)
        self._installing[job.sid] = installing
        stack.callback(self._installing.pop, job.sid, None)

    def _context(self, job: Job) -> HarnessContext:
        return HarnessContext(
            adapter_url=self.url_for(job.sid),
            session_id=job.sid,
            model=self.config.model_name,
            workdir=job.row.workdir,
            log_dir=job.art,
        )

    async def prepare(self, job: Job, sb: Sandbox) -> None:
        async with boundary(InfraFailure, "agent install", stage="install", passes=(SandboxError,)):
            with job.timings.step("install_wait"):
                await self._installing[job.sid]
            with job.timings.step("configure"):
                await self.harness.configure(sb, self._context(job))

    async def act(self, job: Job, sb: Sandbox) -> ActResult:
        sid, record, timings, sessions = job.sid, job.record, job.timings, self.adapter.sessions
        if self.on_session_open is not None:
            with timings.step("session_open"):
                await self.on_session_open(sid, job.row)
        prompt = render_prompt(
            job.row.problem_statement, job.row.workdir, self.config.prompt_template
        )
        agent, breach = await self.agent.run(
            sb, self._context(job), prompt, sid, self.adapter.engine
        )
        if breach is None:
            assert agent is not None
            record.agent_exit_code = agent.exit_code
            record.agent_timed_out = agent.timed_out
            timings.steps["agent_cli"] = agent.duration_s
        with timings.step("settled"):
            await sessions.settled(sid, timeout=10.0)
        turns = sessions.turns(sid)

        def samples(reward: float) -> list[Any]:
            return rollout_samples(
                self.config, self.decode, job.row, job.base, sid, turns, record, reward,
                job.evaluation,
            )  # fmt: skip

        if breach is not None:
            return ActResult(samples, breach=breach)
        assert agent is not None
        event(
            "agent_done",
            sid,
            exit_code=agent.exit_code,
            timed_out=agent.timed_out,
            turns=len(turns),
            agent_s=round(agent.duration_s, 3),
        )
        check_agent(sessions.errors(sid), agent, turns, record)
        return ActResult(samples, agent_log=agent.host_log_path)

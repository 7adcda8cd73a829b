"""The CLI act's watched run: the harness's host files to mount, and the CLI's run, watched for
trainer aborts and for the sandbox's resource limits. A limit the agent hit is the model's
(returned as the breach, never raised); the trainer's abort is
:class:`~coding_agent_rl.errors.RolloutAborted`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.errors import InfraFailure, RolloutAborted, SandboxError, boundary
from coding_agent_rl.grading.workspace import prepare_agent_workspace
from coding_agent_rl.harness import AgentRun, BaseHarness, HarnessContext
from coding_agent_rl.harness.launch import RUN_ROOT
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.rollout.sandboxes import FreshSandboxes
from coding_agent_rl.sandbox import BACKENDS, Sandbox
from coding_agent_rl.sandbox.task import task_options

log = logging.getLogger("coding_agent_rl.rollout.runner")

ABORT_POLL_S = 0.05  # how often the agent phase checks whether its session was aborted


class AbortWatch(Protocol):
    """What the agent phase asks the policy engine: whether ``sid``'s requests were aborted."""

    def aborted(self, sid: str) -> str | None: ...


async def settle(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` unless it is done, wait for it, and mark its outcome as seen."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


class AgentPhase:
    """Creates agent sandboxes and runs the CLI in them; shared by a runner's rollouts."""

    def __init__(self, config: RolloutConfig, harness: BaseHarness | None, network: AgentNetwork):
        self.config = config
        self.harness = harness
        self.network = network
        self._mounts: dict[str, str] | None = None  # host file -> sandbox path, once known
        self._mounts_task: asyncio.Future[dict[str, str]] | None = None

    def sandbox_options(self, row: TaskRow) -> dict[str, Any]:
        """The agent sandbox's options for ``row`` (the CLI's mounts once they are known)."""
        cfg = self.config
        opts = task_options(
            cfg.backend,
            {**cfg.sandbox_options, **self.network.options()},
            resources=row.resources,
            writable=[row.workdir, RUN_ROOT],
        )
        if self._mounts:
            opts["mounts"] = {**(opts.get("mounts") or {}), **self._mounts}
        return opts

    async def create_sandbox(self, row: TaskRow, *, template: bool = False) -> Sandbox:
        """A started agent sandbox for a prepared supply (``template``: one made to be
        snapshotted, ``Sandbox.template_options``), started as the pipeline's own are
        (:class:`~coding_agent_rl.rollout.sandboxes.FreshSandboxes`)."""
        cfg = self.config
        await self.agent_mounts()
        opts = self.sandbox_options(row)
        if template:
            opts = BACKENDS.load(cfg.backend).template_options(opts)
        try:
            return await FreshSandboxes().acquire(cfg.backend, row.image, opts)
        except SandboxError as e:
            self.mount_failed(e)
            raise InfraFailure(f"sandbox: {e}", stage="sandbox") from e

    @staticmethod
    async def prepare_repo(sb: Sandbox, row: TaskRow) -> str:
        """Run the row's set-up, hide the future from git; returns the base commit id."""
        async with boundary(InfraFailure, "workspace", stage="workspace", passes=(SandboxError,)):
            return await prepare_agent_workspace(sb, row)

    def mount_failed(self, error: Exception) -> None:
        """The agent sandbox failed to start: if its mounts were why, upload from now on."""
        if self._mounts and "mount" in str(error).lower():
            log.warning("cannot mount the agent CLI (%s); uploading it from now on", error)
            self._mounts = {}

    async def agent_mounts(self) -> dict[str, str]:
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

    async def run(
        self, sb: Sandbox, ctx: HarnessContext, prompt: str, sid: str, engine: AbortWatch
    ) -> tuple[AgentRun | None, str | None]:
        """The CLI's run within its budget: ``(run, None)``, or ``(None, the limit it hit)``.

        Watched while it runs for the policy server aborting a request of ``sid`` (raises
        :class:`RolloutAborted`; cancelling the run kills the CLI's processes) and, every
        ``limits_poll_s`` and once after, for a resource limit of its sandbox: a breach destroys
        the sandbox at once (after a fork bomb not even a kill command can start in it)."""
        assert self.harness is not None
        run = asyncio.ensure_future(self.harness.run(sb, ctx, prompt, self.config.agent_budget_s))
        watch = asyncio.ensure_future(self._watch_limits(sb))
        try:
            while not run.done():
                if (reason := engine.aborted(sid)) is not None:
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
            if (reason := engine.aborted(sid)) is not None:
                raise RolloutAborted(reason)  # the CLI may have exited on the refusal
            hit = await sb.limit_breaches()
            return (None, "; ".join(hit)) if hit else (agent, None)
        finally:
            await settle(watch)
            await settle(run)

    async def _watch_limits(self, sb: Sandbox) -> str:
        while True:
            await asyncio.sleep(self.config.limits_poll_s)
            if hit := await sb.limit_breaches():
                return "; ".join(hit)

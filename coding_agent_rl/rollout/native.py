"""The native act (``run --agent native``, ``SWE_AGENT=native``): the coding environment driven
by the native multi-turn loop on the sandbox the pipeline hands it. One sample per rollout
(``metadata.segment == "final"``, ``metadata.turns`` per turn); the agent log is
``transcript.txt`` (every action and observation in full).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from coding_agent_rl.datasets.prompt import render_prompt
from coding_agent_rl.datasets.schema import TaskRow
from coding_agent_rl.env.coding import NO_TOOL_CALL, CodingEnv, CodingEnvConfig
from coding_agent_rl.env.encoding import ChatEncoder
from coding_agent_rl.env.episode import ABORTED, LoopConfig
from coding_agent_rl.env.loop import run_episode
from coding_agent_rl.env.sample import fill_sample, rollout_metrics
from coding_agent_rl.env.tools import STAGING_DIR, ToolLimits
from coding_agent_rl.errors import InfraFailure, SandboxError, TaskDataError, boundary
from coding_agent_rl.harness.agent_user import agent_user_script, default_home
from coding_agent_rl.rollout.act import ActResult, Job, SessionHook, no_session
from coding_agent_rl.rollout.attribution import ArtifactBudget
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.isolation import AgentNetwork
from coding_agent_rl.sandbox import Sandbox
from coding_agent_rl.sandbox.task import task_options
from coding_agent_rl.settings import default
from coding_agent_rl.types import Sample

NATIVE = "native"
DEFAULT_MAX_TURNS = 50


@dataclasses.dataclass
class NativeOptions:
    """The native agent's settings (``RuntimeConfig.harness_options`` when the agent is native)."""

    max_turns: int | None = None  # default: RolloutConfig.max_turns, else 50
    max_response: int | None = None  # response tokens per sample (slime's max_response_len)
    max_env_retries_per_turn: int = 3
    env_retry_backoff_s: float = 0.25
    env_step_timeout_s: float | None = None
    on_no_tool_call: str = "submit"  # | "nudge"
    bash_timeout_s: float = 120.0
    max_output_chars: int = 16_000
    user: str = "agent"

    def __post_init__(self) -> None:
        if self.on_no_tool_call not in NO_TOOL_CALL:
            raise ValueError(f"on_no_tool_call must be one of {', '.join(NO_TOOL_CALL)}")
        for name in ("max_turns", "max_response"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


class NativeAct:
    """The policy's tool calls run by the coding environment; shared by a runner's rollouts."""

    def __init__(
        self,
        *,
        engine: Any,
        encoder: ChatEncoder,
        config: RolloutConfig,
        options: NativeOptions | None = None,
        tool_parser: str = default("tool_parser"),
        reasoning_parser: str | None = default("reasoning_parser"),
        on_session_open: SessionHook | None = None,
    ):
        self.engine = engine
        self.encoder = encoder
        self.config = config
        self.options = options or NativeOptions()
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser
        self.on_session_open = on_session_open
        self.network = native_network(config.backend)

    def decode(self, ids: list[int]) -> str:
        return str(self.encoder.tokenizer.decode(ids, skip_special_tokens=False))

    def loop_config(self) -> LoopConfig:
        o, c = self.options, self.config
        return LoopConfig(
            max_turns=o.max_turns or c.max_turns or DEFAULT_MAX_TURNS,
            max_context=c.max_context,
            max_response=o.max_response,
            max_env_retries_per_turn=o.max_env_retries_per_turn,
            env_retry_backoff_s=o.env_retry_backoff_s,
            env_step_timeout_s=o.env_step_timeout_s,
        )

    def make_env(self, row: Any, sb: Sandbox | None = None) -> CodingEnv:
        o = self.options
        config = CodingEnvConfig(
            tool_parser=self.tool_parser,
            reasoning_parser=self.reasoning_parser,
            user=o.user,
            limits=ToolLimits(bash_timeout_s=o.bash_timeout_s, max_output_chars=o.max_output_chars),
            on_no_tool_call=o.on_no_tool_call,
        )
        prompt = render_prompt(row.problem_statement, row.workdir, self.config.prompt_template)
        return CodingEnv(row, config, prompt=prompt, sandbox=sb)

    def session(self, job: Job) -> contextlib.AbstractAsyncContextManager[None]:
        return no_session(job)

    async def sandbox_options(self, row: TaskRow) -> dict[str, Any]:
        return native_sandbox_options(self.config, self.network, row)

    def sandbox_failed(self, error: Exception) -> None:
        return None

    async def attach(self, job: Job, sb: Sandbox, stack: contextlib.AsyncExitStack) -> None:
        return None

    async def prepare(self, job: Job, sb: Sandbox) -> None:
        async with boundary(InfraFailure, "agent user", stage="workspace", passes=(SandboxError,)):
            await setup_agent_user(sb, self.options.user, job.row.workdir)

    async def act(self, job: Job, sb: Sandbox) -> ActResult:
        row, record, timings = job.row, job.record, job.timings
        if self.on_session_open is not None:
            with timings.step("session_open"):
                await self.on_session_open(job.sid, row)
        env = self.make_env(row, sb)
        try:
            episode = await run_episode(
                env,
                engine=self.engine,
                encoder=self.encoder,
                sampling_params=job.sampling_params,
                config=self.loop_config(),
                routing_key=job.sid,
            )
        finally:
            await env.close()
        timings.steps["env_s"] = sum(t.env_s for t in episode.turns)
        timings.steps["generate_s"] = sum(t.generate_s for t in episode.turns)
        record.set(turns=len(episode.turns), num_segments=1, metrics=rollout_metrics(episode))
        ArtifactBudget().write(job.art, "transcript.txt", _transcript(env.transcript))
        log = job.art / "transcript.txt" if job.art is not None else None
        if episode.status == ABORTED:
            reason = f"{episode.end}: {episode.reason}"
            if episode.failure_kind == "data":
                raise TaskDataError(reason)
            raise InfraFailure(reason, stage="env")

        def samples(reward: float) -> list[Sample]:
            sample = dataclasses.replace(
                job.base,
                session_id=job.sid,
                metadata={
                    **job.base.metadata,
                    "instance_id": row.instance_id,
                    "failure_kind": record.failure_kind,
                },
            )
            if reward < 1.0 and not record.get("fail_reason") and episode.reason:
                record.set(fail_reason=episode.reason)
            fill_sample(
                sample, episode, decode=self.decode, reward=reward,
                metadata={"rollout_reward": reward},
            )  # fmt: skip
            return [sample]

        return ActResult(samples, agent_log=log)


def native_network(backend: str) -> AgentNetwork:
    """No network for the native agent's sandbox (nothing inside needs one), where the backend
    can enforce that; else its open network (the record says which)."""
    try:
        return AgentNetwork("none", backend)
    except ValueError:
        return AgentNetwork("open", backend)


def native_sandbox_options(
    config: RolloutConfig, network: AgentNetwork, row: TaskRow
) -> dict[str, Any]:
    return task_options(
        config.backend,
        {**config.sandbox_options, **network.options()},
        resources=row.resources,
        writable=[row.workdir],
    )


async def setup_agent_user(sb: Sandbox, user: str, workdir: str) -> None:
    """The repository handed to the unprivileged agent user; the editor's staging folder."""
    setup = agent_user_script(user, default_home(user), workdir)
    setup += f"mkdir -p {STAGING_DIR} && chmod 755 {STAGING_DIR}\n"
    await sb.exec(setup, check=True, timeout=300)


def _transcript(pairs: list[tuple[str, str]]) -> str:
    out = []
    for i, (action, observation) in enumerate(pairs):
        out.append(f"===== turn {i} · action =====\n{action}\n")
        out.append(f"----- turn {i} · observation -----\n{observation}\n")
    return "\n".join(out)

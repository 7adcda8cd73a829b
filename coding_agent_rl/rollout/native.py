"""One native rollout (``run --agent native``, ``SWE_AGENT=native``): the coding environment
driven by the native multi-turn loop, graded like a CLI rollout, written like one.

Same interface, record and failure policy as :class:`RolloutRunner` (whose attempt loop,
placeholder and artifact helpers it reuses): ``infra`` failures (sandbox, workspace, policy
server, an environment failing past its retry budget, grading) return one aborted placeholder and
are retried within ``infra_retries``; the model's outcomes are kept with their reward. The result
is one sample per rollout (``metadata.segment == "final"``, ``metadata.turns`` per turn).
Artifacts: ``diff.patch``, ``test_log.txt`` and ``transcript.txt`` (every action and observation
in full, shown as the agent log by the report).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from coding_agent_rl.datasets.prompt import PROBLEM_FILE, render_prompt
from coding_agent_rl.env.coding import NO_TOOL_CALL, CodingEnv, CodingEnvConfig
from coding_agent_rl.env.encoding import ChatEncoder
from coding_agent_rl.env.episode import ABORTED, LoopConfig
from coding_agent_rl.env.loop import run_episode
from coding_agent_rl.env.sample import fill_sample, rollout_metrics
from coding_agent_rl.env.tools import ToolLimits
from coding_agent_rl.rollout.attribution import ArtifactBudget, InfraFailure
from coding_agent_rl.rollout.config import RolloutConfig, RolloutOutcome
from coding_agent_rl.rollout.record import RolloutRecord
from coding_agent_rl.rollout.runner import RolloutRunner, SessionHook
from coding_agent_rl.rollout.timing import Timings
from coding_agent_rl.sandbox import BACKENDS
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


class NativeRunner(RolloutRunner):
    """Runs native rollouts against one engine (an SGLang client); safe to use concurrently."""

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
        run_id: str | None = None,
        node: str | None = None,
    ):
        super().__init__(
            adapter=None,
            adapter_url="",
            harness=None,
            config=config,
            decode=lambda ids: encoder.tokenizer.decode(ids, skip_special_tokens=False),
            on_session_open=on_session_open,
            run_id=run_id,
            node=node,
        )
        self.engine = engine
        self.encoder = encoder
        self.options = options or NativeOptions()
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser

    def loop_config(self) -> LoopConfig:
        o, c = self.options, self.config
        return LoopConfig(
            max_turns=o.max_turns or c.max_turns or DEFAULT_MAX_TURNS,
            max_context=c.max_context,
            max_response=o.max_response,
            max_env_retries_per_turn=o.max_env_retries_per_turn,
        )

    def make_env(self, row: Any) -> CodingEnv:
        c, o = self.config, self.options
        grade_ahead = c.grade_ahead
        if grade_ahead is None:
            grade_ahead = BACKENDS.load(c.backend).idle_is_free
        config = CodingEnvConfig(
            backend=c.backend,
            sandbox_options=dict(c.sandbox_options),
            tool_parser=self.tool_parser,
            reasoning_parser=self.reasoning_parser,
            user=o.user,
            limits=ToolLimits(bash_timeout_s=o.bash_timeout_s, max_output_chars=o.max_output_chars),
            on_no_tool_call=o.on_no_tool_call,
            eval_timeout_s=c.eval_timeout_s,
            grade_ahead=grade_ahead,
        )
        return CodingEnv(
            row,
            config,
            prompt=render_prompt(row.problem_statement, row.workdir, c.prompt_template),
            files={f"{row.workdir}/{PROBLEM_FILE}": row.problem_statement},
        )

    async def _attempt(
        self,
        row: Any,
        base: Sample,
        attempt: int,
        sampling_params: dict[str, Any] | None,
        evaluation: bool,
    ) -> RolloutOutcome:
        sid, timings, record, art = self._begin(row, base, attempt)
        env = self.make_env(row)
        try:
            samples = await self._guarded(
                self._native(row, base, sid, env, record, timings, art, sampling_params),
                base,
                record,
            )
        finally:
            await env.close()
        return self._end(sid, samples, record, timings)

    async def _native(
        self,
        row: Any,
        base: Sample,
        sid: str,
        env: CodingEnv,
        record: RolloutRecord,
        timings: Timings,
        art: pathlib.Path | None,
        sampling_params: dict[str, Any] | None,
    ) -> list[Sample]:
        if self.on_session_open is not None:
            with timings.step("session_open"):
                await self.on_session_open(sid, row)
        with timings.phase("agent_s"):
            episode = await run_episode(
                env,
                engine=self.engine,
                encoder=self.encoder,
                sampling_params=sampling_params,
                config=self.loop_config(),
                routing_key=sid,
            )
        # reset (sandbox + workspace) ran inside the loop: book it as the sandbox phase.
        timings.phases["sandbox_s"] = episode.reset_s
        timings.phases["agent_s"] -= episode.reset_s
        timings.steps["env_s"] = sum(t.env_s for t in episode.turns)
        timings.steps["generate_s"] = sum(t.generate_s for t in episode.turns)
        record.set(turns=len(episode.turns), num_segments=1, metrics=rollout_metrics(episode))
        budget = ArtifactBudget()
        budget.write(art, "transcript.txt", _transcript(env.transcript))
        if episode.status == ABORTED:
            reason = f"{episode.end}: {episode.reason}"
            if episode.failure_kind == "data":
                return self._abort(base, record, reason, "data", None)
            raise InfraFailure(reason, stage="env")
        outcome = await env.evaluate()
        timings.phases["diff_s"] = env.timings.get("diff_s", 0.0)
        timings.phases["grade_s"] = env.timings.get("grade_s", 0.0)
        budget.write(art, "diff.patch", env.diff_text)
        budget.write(art, "test_log.txt", env.test_log)
        record.set(artifacts=self._native_artifacts(art))
        record.set(**outcome.record)
        if outcome.failure_kind == "infra":
            raise InfraFailure(f"grading: {outcome.reason}", stage="grading")
        reward = outcome.reward if outcome.reward is not None else 0.0
        record.reward = reward
        record.failure_kind = outcome.failure_kind
        if reward < 1.0:
            record.set(fail_reason=outcome.reason or episode.reason)
        sample = dataclasses.replace(
            base,
            session_id=sid,
            metadata={
                **base.metadata,
                "instance_id": row.instance_id,
                "failure_kind": outcome.failure_kind,
            },
        )
        fill_sample(
            sample,
            episode,
            decode=self.decode or str,
            reward=reward,
            metadata={"rollout_reward": reward},
        )
        return [sample]

    def _native_artifacts(self, art: pathlib.Path | None) -> dict[str, str]:
        if art is None or self.config.out_dir is None:
            return {}
        root = self.config.out_dir
        names = {"diff": "diff.patch", "test_log": "test_log.txt", "agent_log": "transcript.txt"}
        return {k: str((art / v).relative_to(root)) for k, v in names.items() if (art / v).exists()}


def _transcript(pairs: list[tuple[str, str]]) -> str:
    out = []
    for i, (action, observation) in enumerate(pairs):
        out.append(f"===== turn {i} · action =====\n{action}\n")
        out.append(f"----- turn {i} · observation -----\n{observation}\n")
    return "\n".join(out)

"""slime's entry point for the native loop with any environment module.

``--custom-generate-function-path coding_agent_rl.generate_native.generate`` and
``--custom-config-path CONFIG.yaml`` (its keys: :mod:`coding_agent_rl.env.slime_config`).
The coding environment (``rollout_interaction_env_path: coding``, i.e.
``coding_agent_rl.env.coding``) runs through the rollout pipeline exactly as
``coding_agent_rl.generate.generate`` with ``SWE_AGENT=native`` does: the same settings
(sandbox options, tamper policy, prompt, output folder), record and samples. Any other environment
is run by the native loop on the same runtime's tokenizer, encoder and SGLang client. Either
way it returns one sample (slime then skips its reward model when the reward is set); never
raises for a per-sample failure: an aborted placeholder instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from coding_agent_rl import generate as cli_generate
from coding_agent_rl.env.base import call
from coding_agent_rl.env.episode import ABORTED, LoopConfig
from coding_agent_rl.env.loop import run_episode
from coding_agent_rl.env.sample import abort_sample, fill_sample
from coding_agent_rl.env.slime_config import build_env, load_env_module, loop_config_from_args
from coding_agent_rl.errors import RolloutAborted
from coding_agent_rl.trainer_abort import slime_abort_flag, until_stopped

log = logging.getLogger(__name__)

_runtime: Any = None
_runtime_lock: asyncio.Lock | None = None
_writer: Any = None


async def _get_runtime(args: Any, loop: LoopConfig) -> Any:
    global _runtime, _runtime_lock, _writer
    if _runtime is None:
        _runtime_lock = _runtime_lock or asyncio.Lock()
        async with _runtime_lock:
            if _runtime is None:
                native = {
                    "max_turns": loop.max_turns,
                    "max_response": loop.max_response,
                    "max_env_retries_per_turn": loop.max_env_retries_per_turn,
                    "env_retry_backoff_s": loop.env_retry_backoff_s,
                    "env_step_timeout_s": loop.env_step_timeout_s,
                }
                config = cli_generate.runtime_config_from_args(args, agent="native", native=native)
                _runtime, _writer = await cli_generate.start_runtime(config)
    return _runtime


async def generate(
    args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False
) -> Any:
    """One episode of ``sample`` through the native loop."""
    if getattr(sample, "rollout_id", None) is None and hasattr(sample, "rollout_id"):
        sample.rollout_id = sample.index
    try:
        env_path, config = loop_config_from_args(args)
        module = load_env_module(env_path)
        runtime = await _get_runtime(args, config)
    except Exception as e:  # misconfiguration: every sample says why, the batch goes on
        return abort_sample(sample, f"native loop setup: {type(e).__name__}: {e}", "infra")
    if getattr(module, "PIPELINE_AGENT", None):  # the coding env: the rollout pipeline
        cli_generate.check_options(args)
        out = await cli_generate.run_sample(
            runtime, _writer, args, sample, sampling_params, evaluation
        )
        return out[0]  # one sample per native rollout, as for any environment here
    return await _episode(runtime, module, config, args, sample, sampling_params)


async def _episode(
    runtime: Any,
    module: Any,
    config: LoopConfig,
    args: Any,
    sample: Any,
    sampling_params: dict[str, Any],
) -> Any:
    """Any other environment: the episode on the runtime's engine and encoder."""
    act = runtime.runner.act
    try:
        env = build_env(module, sample, args)
    except Exception as e:
        return abort_sample(sample, f"build_env: {type(e).__name__}: {e}", "data")
    metadata = sample.metadata or {}
    stop = slime_abort_flag(args)  # slime's end-of-step abort, polled through the episode
    try:
        episode = await until_stopped(
            run_episode(
                env,
                engine=act.engine,
                encoder=act.encoder,
                sampling_params=sampling_params,
                config=config,
                routing_key=getattr(sample, "session_id", None) or f"native-{uuid.uuid4().hex}",
                prompt=sample.prompt,
                tools=metadata.get("tools"),
            ),
            stop,
        )
        if episode.status == ABORTED:
            return abort_sample(
                sample, episode.reason or episode.end, episode.failure_kind or "infra"
            )
        outcome = (
            await until_stopped(call(env.evaluate), stop) if hasattr(env, "evaluate") else None
        )
        if outcome is not None and outcome.failure_kind == "infra":
            return abort_sample(sample, f"evaluate: {outcome.reason}", "infra")
        reward = outcome.reward if outcome is not None else None
        extra: dict[str, Any] = {}
        if outcome is not None:
            extra = {"failure_kind": outcome.failure_kind, "rollout_reward": reward}
            if outcome.reason and (reward or 0.0) < 1.0:
                extra["fail_reason"] = outcome.reason
        return fill_sample(sample, episode, decode=act.decode, reward=reward, metadata=extra)
    except RolloutAborted as e:  # the trainer ended the step: the episode was cancelled
        return abort_sample(sample, str(e), "aborted")
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a bug must cost one sample, not the batch
        log.exception("native episode of sample %s crashed", getattr(sample, "index", "?"))
        return abort_sample(sample, f"internal error: {type(e).__name__}: {e}", "infra")
    finally:
        with contextlib.suppress(Exception):
            await call(env.close)

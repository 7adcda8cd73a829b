"""slime entry points.

``--custom-generate-function-path coding_agent_rl.generate.generate`` and
``--custom-rm-path coding_agent_rl.generate.reward``.

Once per process (on the first call): the tokenizer from ``args.hf_checkpoint``, the adapter in a
background thread (``ADAPTER_PORT``, else ephemeral), SGLang at ``args.sglang_router_ip/port``.
Environment: ``SWE_AGENT`` (claude_code | codex | ...), ``CODING_AGENT_RL_SANDBOX`` (docker |
e2b | local), ``SWE_AGENT_TIME_BUDGET_SEC``, ``SWE_EVAL_TIMEOUT_SEC``, ``SWE_ROLLOUT_DEADLINE_SEC``,
``CODING_AGENT_RL_REWARD_MODE`` (full | split), ``SWE_CC_PROMPT``,
``CODING_AGENT_RL_SANDBOX_OPTIONS`` (a JSON object of backend options, e.g. limits:
``{"memory": "8g", "pids": 2048}``); ``CODING_AGENT_RL_AGENT_NETWORK`` (adapter-only | open |
none), ``SWE_BOOT_CONCURRENCY`` and ``ADAPTER_PUBLIC_HOST`` / ``ADAPTER_BIND_HOST`` are read by
the rollout, sandbox and harness layers. Sandboxes get the same default limits and isolation as
under ``coding-agent-rl run``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from coding_agent_rl.types import Sample, aborted_sample

_runtime: Any = None
_runtime_lock: asyncio.Lock | None = None


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def runtime_config_from_args(args: Any) -> Any:
    """slime's ``args`` namespace + environment -> :class:`RuntimeConfig`."""
    from coding_agent_rl.harness.base import json_env
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    host = getattr(args, "sglang_router_ip", None) or "127.0.0.1"
    port = getattr(args, "sglang_router_port", None)
    rollout = RolloutConfig(
        backend=os.environ.get("CODING_AGENT_RL_SANDBOX", "docker"),
        sandbox_options=dict(json_env("CODING_AGENT_RL_SANDBOX_OPTIONS", dict) or {}),
        agent_budget_s=_env_float("SWE_AGENT_TIME_BUDGET_SEC", 1800.0),
        eval_timeout_s=_env_float("SWE_EVAL_TIMEOUT_SEC", 600.0),
        deadline_s=_env_float("SWE_ROLLOUT_DEADLINE_SEC", 0.0) or None,
        reward_mode=os.environ.get("CODING_AGENT_RL_REWARD_MODE", "full"),
        max_context=getattr(args, "rollout_max_context_len", None),
        model_name=os.environ.get("CODING_AGENT_RL_MODEL_NAME", "policy"),
    )
    return RuntimeConfig(
        agent=os.environ.get("SWE_AGENT", "claude_code"),
        sglang_url=f"http://{host}:{port}",
        tokenizer=getattr(args, "hf_checkpoint", None) or "qwen3",
        tool_parser=getattr(args, "sglang_tool_call_parser", None) or "qwen25",
        reasoning_parser=getattr(args, "sglang_reasoning_parser", None),
        rollout=rollout,
        in_thread=True,
    )


async def _get_runtime(args: Any) -> Any:
    global _runtime, _runtime_lock
    if _runtime is None:
        if _runtime_lock is None:
            _runtime_lock = asyncio.Lock()
        async with _runtime_lock:
            if _runtime is None:
                from coding_agent_rl.rollout.runtime import Runtime

                _runtime = await Runtime(runtime_config_from_args(args)).start()
    return _runtime


async def generate(
    args: Any, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False
) -> list[Sample]:
    """One rollout of ``sample`` (a dataset row). Never raises for a per-sample failure: it
    returns one aborted placeholder (``remove_sample=True``, ``metadata.abort_reason``)."""
    from coding_agent_rl.datasets.schema import DatasetError, row_from_sample

    if sample.rollout_id is None:
        sample.rollout_id = sample.index
    try:
        row = row_from_sample(sample)
    except DatasetError as e:
        return [aborted_sample(sample, f"task data: {e}", "data")]
    try:
        runtime = await _get_runtime(args)
    except Exception as e:  # no adapter / tokenizer: nothing can run, but the batch goes on
        return [aborted_sample(sample, f"runtime start failed: {type(e).__name__}: {e}", "infra")]
    outcome = await runtime.runner.run(
        row, sample, sampling_params=sampling_params, evaluation=evaluation
    )
    return outcome.samples


async def reward(args: Any, sample: Sample) -> float:
    """``--custom-rm-path``: the reward graded during ``generate`` (undivided per rollout)."""
    stored = sample.metadata.get("rollout_reward", sample.reward)
    return float(stored) if isinstance(stored, (int, float)) else 0.0

"""slime's custom generate function for agent CLIs: one task row in, the rollout's sibling samples
out, on a runtime started once per process and shared with the native entry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.errors import RolloutAborted, UserError
from coding_agent_rl.settings import Settings
from coding_agent_rl.siblings import Siblings
from coding_agent_rl.types import aborted_sample, from_caller, to_caller

_runtime: Any = None
_runtime_lock: asyncio.Lock | None = None
_writer: Any = None  # RunWriter of CODING_AGENT_RL_OUT_DIR, once the runtime started
_trees: Any = None  # rollout.branch.TreeGroups, with CODING_AGENT_RL_TREE_ROLLOUTS

# slime's --advantage-estimator values whose rewards it group-normalises, and those of them it
# also divides by the group's standard deviation (with --grpo-std-normalization).
NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_ESTIMATORS = ("grpo", "gspo", "cispo")


class UnsupportedOption(UserError):
    """A trainer option these rollouts cannot honour (refused before any rollout starts)."""


def check_options(args: Any) -> None:
    """Raise :class:`UnsupportedOption` for a slime option whose per-token data the rollouts do
    not record (slime's trainer would assert on it after the whole rollout step)."""
    top_p = getattr(args, "rollout_top_p", 1.0)
    if top_p is not None and float(top_p) != 1.0:
        raise UnsupportedOption(
            f"--rollout-top-p {top_p}: coding_agent_rl does not record SGLang's top-p replay "
            "data (rollout_top_p_token_ids/offsets); use --rollout-top-p 1.0"
        )
    if getattr(args, "use_rollout_routing_replay", False):
        raise UnsupportedOption(
            "--use-rollout-routing-replay: coding_agent_rl does not record SGLang's routed "
            "experts (rollout_routed_experts); drop the flag"
        )


def runtime_config_from_args(
    args: Any,
    conf: Settings | None = None,
    *,
    agent: str | None = None,
    native: dict[str, Any] | None = None,
) -> Any:
    """slime's ``args`` namespace + the settings (read from the environment when not given)
    -> :class:`RuntimeConfig`; ``agent`` overrides the settings' agent, ``native`` adds native
    options (the native entry's YAML)."""
    from coding_agent_rl.rollout.config import RolloutConfig
    from coding_agent_rl.rollout.runtime import RuntimeConfig

    conf = conf or settings.load()
    host = getattr(args, "sglang_router_ip", None) or "127.0.0.1"
    port = getattr(args, "sglang_router_port", None)
    rollout = RolloutConfig.from_settings(
        conf,
        max_context=getattr(args, "rollout_max_context_len", None),
        max_response=getattr(args, "rollout_max_response_len", None),
        # A group's samples share one preparation with fork_groups (rollout/prepare.py).
        group_size=getattr(args, "n_samples_per_prompt", None),
        # slime claims a group's samples at once and tells nothing ahead: a pool only if asked.
        pool_size=conf.pool_size or 0,
    )
    agent = agent or conf.agent
    native = dict(native or {})
    if agent == "native":  # the native loop's budgets, as slime names them
        native.setdefault("max_turns", getattr(args, "max_turns", None))
        native.setdefault("max_response", getattr(args, "rollout_max_response_len", None))
    from coding_agent_rl.multimodal.processor import has_image_processor

    checkpoint = getattr(args, "hf_checkpoint", None)
    return RuntimeConfig(
        agent=agent,
        harness_options={k: v for k, v in native.items() if v is not None},
        sglang_url=f"http://{host}:{port}",
        tokenizer=checkpoint or conf.tokenizer,
        vision=checkpoint if has_image_processor(checkpoint) else None,  # a VLM: images as tokens
        template_kwargs=getattr(args, "apply_chat_template_kwargs", None) or {},
        tool_parser=getattr(args, "sglang_tool_call_parser", None) or conf.tool_parser,
        reasoning_parser=getattr(args, "sglang_reasoning_parser", None),
        rollout=rollout,
        in_thread=True,
        adapter_port=conf.adapter_port or 0,
        settings=conf,
    )


class _RayRuntime:
    """``executor=ray``: rollouts go to the workers on slime's Ray cluster (``ray_address``, else
    the Ray slime's process already initialised); ``runner.run`` submits to that pool."""

    def __init__(self, config: Any):
        from coding_agent_rl.rollout.executor import create_executor

        self.config = config
        self.runner = create_executor(config.settings.executor, config)

    async def start(self) -> _RayRuntime:
        await self.runner.start()
        return self

    async def stop(self) -> None:
        await self.runner.stop()


def _settings() -> Settings:
    """The running runtime's settings; before it starts, the environment as it is."""
    return _runtime.config.settings if _runtime is not None else settings.load()


async def start_runtime(config: Any) -> tuple[Any, Any]:
    """A started runtime for ``config`` (in-process or on Ray) and its RunWriter (or None);
    stopped at the process's exit."""
    from coding_agent_rl.rollout.outputs import RunWriter
    from coding_agent_rl.rollout.runtime import Runtime

    out = config.rollout.out_dir
    writer = RunWriter(out, append=True, samples=False) if out else None
    if config.settings.executor != "in-process":
        runtime: Any = await _RayRuntime(config).start()
    else:
        runtime = await Runtime(config).start()
    stop_at_exit(runtime)
    return runtime, writer


def stop_at_exit(runtime: Any) -> None:
    """Stop ``runtime`` (its HTTP client sessions closed) when the process exits, on the event
    loop it runs on: slime never stops what its generate function started."""
    import atexit

    loop = asyncio.get_running_loop()

    def stop() -> None:
        if loop.is_closed():
            return
        with contextlib.suppress(Exception):
            if loop.is_running():  # slime's loop, in its own thread
                asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result(timeout=10)
            else:
                loop.run_until_complete(runtime.stop())

    atexit.register(stop)


async def _get_runtime(args: Any) -> Any:
    global _runtime, _runtime_lock, _writer
    if _runtime is None:
        if _runtime_lock is None:
            _runtime_lock = asyncio.Lock()
        async with _runtime_lock:
            if _runtime is None:
                _runtime, _writer = await start_runtime(runtime_config_from_args(args))
    return _runtime


async def generate(
    args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False
) -> list[Any]:
    """One rollout of ``sample`` (a dataset row), as a :class:`~coding_agent_rl.siblings.Siblings`
    list of objects of ``sample``'s class. Never raises for a per-sample failure: it returns one
    aborted placeholder (``remove_sample=True``, ``metadata.abort_reason``). ``sample`` itself is
    left unchanged. A requeued ``Siblings`` (slime's partial rollouts) restarts from its origin."""
    from coding_agent_rl.trainer_abort import slime_abort_flag

    check_options(args)
    job = _SampleJob(sample, _settings().dataset_dir)
    if job.row is None:
        return job.failed
    stop = slime_abort_flag(args)
    if stop is not None and (why := stop()) is not None:  # the step is over: boot nothing
        return _aborted(job.placeholder(why, "aborted"), job.base, job.row.instance_id, why)
    try:
        runtime = await _get_runtime(args)
    except Exception as e:  # no adapter / tokenizer: nothing can run, but the batch goes on
        return job.placeholder(f"runtime start failed: {type(e).__name__}: {e}", "infra")
    return await run_sample(runtime, _writer, args, job, sampling_params, evaluation)


class _SampleJob:
    """The caller's sample (a requeued ``Siblings`` restarts from its origin), our ``Sample`` of
    it, and its task row; ``row`` is None when the row is bad (``failed`` says why)."""

    def __init__(self, sample: Any, dataset_dir: Any):
        from coding_agent_rl.datasets.schema import DatasetError, row_from_sample

        if isinstance(sample, Siblings) and sample.origin is not None:
            sample = sample.origin
        self.sample = sample
        self.base = from_caller(sample)
        if self.base.rollout_id is None:
            self.base.rollout_id = self.base.index
        self.row: Any = None
        try:
            self.row = row_from_sample(self.base, base_dir=dataset_dir)
        except DatasetError as e:
            self.failed = self.placeholder(f"task data: {e}", "data")

    def placeholder(self, reason: str, kind: Any) -> Siblings:
        return Siblings(
            [to_caller(aborted_sample(self.base, reason, kind), self.sample)], origin=self.sample
        )


async def run_sample(
    runtime: Any,
    writer: Any,
    args: Any,
    sample: Any,
    sampling_params: dict[str, Any],
    evaluation: bool = False,
) -> list[Any]:
    """One rollout of ``sample`` (or a :class:`_SampleJob` of it) on a started ``runtime`` (see
    :func:`generate`)."""
    from coding_agent_rl.trainer_abort import slime_abort_flag, until_stopped

    job = (
        sample
        if isinstance(sample, _SampleJob)
        else _SampleJob(sample, runtime.config.settings.dataset_dir)
    )
    if job.row is None:
        return job.failed
    sample, base, row, placeholder = job.sample, job.base, job.row, job.placeholder
    stop = slime_abort_flag(args)
    if runtime.config.settings.tree_rollouts and not evaluation:  # a group is one tree
        work = _tree_work(runtime, args, row, base, sampling_params)
    else:
        work = runtime.runner.run(row, base, sampling_params=sampling_params, evaluation=evaluation)
    try:
        outcome = await until_stopped(work, stop)
    except RolloutAborted as e:
        return _aborted(placeholder(str(e), "aborted"), base, row.instance_id, str(e))
    record = outcome.record
    record["agent"] = runtime.config.agent
    if writer is not None:
        writer.add([], record)
    out = Siblings(origin=sample)
    for s in outcome.samples:
        s.metadata["rollout_record"] = dict(record)
        out.append(to_caller(s, sample))
    return out


def _tree_work(runtime: Any, args: Any, row: Any, base: Any, sampling_params: Any) -> Any:
    """The rollout of ``base`` as a member of its group's tree (rollout/branch.py)."""
    global _trees
    from coding_agent_rl.rollout.branch import TreeGroups

    conf = runtime.config.settings
    if isinstance(runtime, _RayRuntime) or conf.agent == "native":
        raise UnsupportedOption(
            "CODING_AGENT_RL_TREE_ROLLOUTS: tree rollouts replay an agent CLI's turns in "
            "process: not with the native agent or CODING_AGENT_RL_EXECUTOR=ray"
        )
    if _trees is None:
        _trees = TreeGroups(conf.tree_branch_at)
    n = int(getattr(args, "n_samples_per_prompt", 1) or 1)
    return _trees.run(runtime.runner, row, base, n, sampling_params)


def _aborted(out: Siblings, base: Any, instance_id: str, reason: str) -> Siblings:
    """The trainer's abort placeholder, with a record saying so."""
    record = {
        "rollout_id": base.rollout_id,
        "instance_id": instance_id,
        "sample_index": base.index,
        "group_index": base.group_index,
        "reward": 0.0,
        "failure_kind": "aborted",
        "abort_reason": reason,
        "retries": 0,
    }
    for s in out:
        s.metadata["rollout_record"] = dict(record)
    return out


async def reward(args: Any, sample: Any) -> Any:
    """``--custom-rm-path``: the reward graded during ``generate`` (undivided per rollout).

    Called as slime calls it: one sample -> a float; a list (slime's batched call for a list
    result, even an empty one) -> one float per item; under ``--group-rm`` the group's items are
    rollouts (lists of siblings), each worth its rollout's reward."""
    if isinstance(sample, list):
        return [_reward_of(s) for s in sample]
    return _reward_of(sample)


def _reward_of(item: Any) -> float:
    if isinstance(item, list):  # one rollout's siblings (slime's --group-rm)
        return _as_float(Siblings(item).reward) if item else 0.0
    stored = (item.metadata or {}).get("rollout_reward", item.reward)
    return _as_float(stored)


def _as_float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """``--custom-reward-post-process-path``: ``(raw_rewards, rewards)`` for slime's flattened
    sample list, one value per sample, in order.

    Groups by ``group_index``, rollouts by ``rollout_id``; each rollout counts once with its
    undivided reward (``metadata.rollout_reward``). For ``args.advantage_estimator`` in
    :data:`NORMALIZED_ESTIMATORS` with ``args.rewards_normalization`` (slime's default; off with
    ``--disable-rewards-normalization``): the group mean over rollouts is subtracted, and for
    :data:`STD_ESTIMATORS` with ``args.grpo_std_normalization`` (default; off with
    ``--disable-grpo-std-normalization``) the result is divided by the group's standard
    deviation over rollouts + 1e-6. Every sibling gets its rollout's value (reward mode
    ``full``) or value / K (``split``). Aborted / removed rollouts are left out of the group
    statistics (value 0). Otherwise ``rewards`` are the raw rewards, as slime's default.
    ``raw_rewards`` are the samples' own rewards (``reward``, or ``reward[args.reward_key]``).
    """
    from coding_agent_rl.trajectory.reward import is_dropped, normalized_rewards, reward_value

    samples = list(samples)
    if any(isinstance(s, list) for s in samples):
        raise TypeError("post_process_rewards takes slime's flattened list of samples")
    key = getattr(args, "reward_key", None)
    raw: list[float] = []
    for s in samples:
        value = reward_value(s, key)
        if isinstance(value, dict):
            raise ValueError(f"sample {s.index}: a dict reward needs args.reward_key")
        if value is None and not is_dropped(s):
            raise ValueError(f"sample {s.index} (rollout {s.rollout_id}) has no reward")
        raw.append(0.0 if value is None else float(value))
    estimator = getattr(args, "advantage_estimator", None)
    if estimator not in NORMALIZED_ESTIMATORS or not getattr(args, "rewards_normalization", False):
        return raw, list(raw)
    rewards = normalized_rewards(
        samples,
        scale=estimator in STD_ESTIMATORS and bool(getattr(args, "grpo_std_normalization", False)),
        split_by_mode=True,
        reward_key=key,
    )
    return raw, rewards


def post_process_tree_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """``--custom-reward-post-process-path``: like :func:`post_process_rewards`, except that the
    samples of a tree rollout (``metadata.tree_id``) get step-level advantages: each branch
    against the siblings sharing its prefix, the root's stretches from its subtree
    (:mod:`coding_agent_rl.trajectory.branching`)."""
    from coding_agent_rl.trajectory.branching import tree_rewards

    return tree_rewards(args, samples, post_process_rewards)

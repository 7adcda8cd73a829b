"""A stand-in for slime's side of the custom-generate contract (slime cannot be installed here:
the PyPI package named ``slime`` is unrelated). Written from the facts in
``docs/facts-slime.md`` (checked against slime's code): the same class shapes, the same
comparisons, the same call order — not slime's code.

What it reproduces:

* :class:`Sample`: slime's dataclass, with ``Status`` a plain :class:`enum.Enum` nested in it
  (lowercase values) and the same fields and defaults, including the ones only slime has
  (multimodal inputs, teacher log probs, train metadata, speculative-decoding and prefix-cache
  counters). slime compares *members*: ``sample.status == Sample.Status.ABORTED``.
* :func:`generate_and_rm`: a sample already COMPLETED / TRUNCATED returns as it is; under the
  semaphore, an aborted state marks the sample ABORTED without calling generate; the custom
  generate gets ``evaluation=`` only when its signature has it; a list result with any ABORTED
  member returns without reward; otherwise samples whose ``reward is None`` go through the
  reward model (``--custom-rm-path``).
* :func:`generate_and_rm_group`: a uuid ``session_id`` per sample that has none, then the
  group's samples concurrently.
* :func:`abort`: the global aborted flag, ``POST /abort_request {"abort_all": true}`` on every
  worker until ``GET /v1/loads`` reports no request (every 3 s), then the pending tasks are
  awaited; with ``partial_rollout`` their groups are collected. ``cancel_first`` models the
  variant that cancels pending tasks before draining the engines.
* The trainer: :func:`validate_rollout_ids` (siblings of a fanned-out list carry one non-None
  ``rollout_id``), :func:`flatten`, :func:`post_process_rewards` (the custom hook, else the
  default group normalisation: reshape to ``(-1, n_samples_per_prompt)`` only when the count is
  exactly ``n_samples_per_prompt * rollout_batch_size``, else one batch-wide row; torch's mean
  and (unbiased) std) and :func:`convert_samples_to_train_data` (its length checks, truncation
  flags by member comparison, removed samples' loss masks zeroed, per-rollout mask sums).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import itertools
import uuid
from enum import Enum
from typing import Any

import aiohttp

ABORT_RETRY_S = 3.0  # slime retries the abort every 3 s until the engines report idle
NORMALIZED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline", "rloo")
STD_NORMALIZED = ("grpo", "gspo", "cispo")


@dataclasses.dataclass
class Sample:
    """slime's ``Sample`` (field names, order, defaults; ``Status`` nested, a plain Enum)."""

    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = dataclasses.field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = dataclasses.field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = dataclasses.field(default_factory=dict)
    generate_function_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    rollout_id: int | None = None
    non_generation_time: float = 0.0

    @dataclasses.dataclass
    class SpecInfo:
        spec_accept_token_num: int = 0
        spec_draft_token_num: int = 0
        spec_verify_ct: int = 0
        completion_token_num: int = 0

    spec_info: SpecInfo = dataclasses.field(default_factory=SpecInfo)

    @dataclasses.dataclass
    class PrefixCacheInfo:
        cached_tokens: int = 0
        total_prompt_tokens: int = 0

    prefix_cache_info: PrefixCacheInfo = dataclasses.field(default_factory=PrefixCacheInfo)

    def get_reward_value(self, args: Any) -> Any:
        key = getattr(args, "reward_key", None)
        return self.reward if not key else self.reward[key]


def load_function(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class GenerateState:
    """slime's per-process rollout state: the semaphore, the aborted flag, pending tasks."""

    def __init__(self, args: Any):
        self.args = args
        self.semaphore = asyncio.Semaphore(args.sglang_server_concurrency)
        self.aborted = False
        self.pendings: set[asyncio.Task] = set()
        self.rm_calls: list[Any] = []  # every sample the reward model scored (for the tests)
        self.unscored: list[list[Sample]] = []  # lists returned unscored for an ABORTED member

    def submit(self, groups: list[list[Sample]], sampling_params: dict[str, Any]) -> None:
        for group in groups:
            coro = generate_and_rm_group(self.args, group, dict(sampling_params), state=self)
            self.pendings.add(asyncio.ensure_future(coro))


async def _rm(args: Any, sample: Sample, state: GenerateState) -> Any:
    state.rm_calls.append(sample)
    return await load_function(args.custom_rm_path)(args, sample)


async def generate_and_rm(
    args: Any,
    sample: Sample,
    sampling_params: dict[str, Any],
    evaluation: bool = False,
    *,
    state: GenerateState,
) -> Sample | list[Sample]:
    if sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED):
        return sample
    async with state.semaphore:
        if state.aborted:
            sample.status = Sample.Status.ABORTED
            return sample
        fn = load_function(args.custom_generate_function_path)
        if "evaluation" in inspect.signature(fn).parameters:
            result = await fn(args, sample, sampling_params, evaluation=evaluation)
        else:
            result = await fn(args, sample, sampling_params)
    if isinstance(result, list):
        if any(s.status == Sample.Status.ABORTED for s in result):
            state.unscored.append(result)
            return result
        unscored = [s for s in result if s.reward is None]
        rewards = await asyncio.gather(*(_rm(args, s, state) for s in unscored))
        for s, r in zip(unscored, rewards, strict=True):
            s.reward = r
        return result
    if result.status == Sample.Status.ABORTED:
        return result
    if result.reward is None:
        result.reward = await _rm(args, result, state)
    return result


async def generate_and_rm_group(
    args: Any,
    group: list[Sample],
    sampling_params: dict[str, Any],
    evaluation: bool = False,
    *,
    state: GenerateState,
) -> list[Sample | list[Sample]]:
    if state.aborted:
        return group
    for sample in group:
        if sample.session_id is None:
            sample.session_id = str(uuid.uuid4())
    tasks = [
        generate_and_rm(args, s, dict(sampling_params), evaluation=evaluation, state=state)
        for s in group
    ]
    return list(await asyncio.gather(*tasks))


async def abort_until_idle(worker_urls: list[str], retry_s: float = ABORT_RETRY_S) -> int:
    """Abort every request on every worker until each reports no request; returns the rounds."""
    rounds = 0
    async with aiohttp.ClientSession() as http:
        busy = list(worker_urls)
        while busy:
            rounds += 1
            still = []
            for url in busy:
                async with http.post(f"{url}/abort_request", json={"abort_all": True}) as r:
                    r.raise_for_status()
                async with http.get(f"{url}/v1/loads") as r:
                    loads = (await r.json())["loads"]
                if sum(x.get("num_running_reqs", 0) + x.get("num_waiting_reqs", 0) for x in loads):
                    still.append(url)
            busy = still
            if busy:
                await asyncio.sleep(retry_s)
    return rounds


async def abort(
    args: Any, state: GenerateState, worker_urls: list[str], *, cancel_first: bool = False
) -> list[list[Any]]:
    """slime's end-of-step abort; returns the collected groups (``partial_rollout`` only)."""
    state.aborted = True
    if cancel_first:
        for task in state.pendings:
            task.cancel()
        await asyncio.gather(*state.pendings, return_exceptions=True)
        state.pendings.clear()
    await abort_until_idle(worker_urls)
    collected = []
    while state.pendings:
        done, state.pendings = await asyncio.wait(
            state.pendings, return_when=asyncio.FIRST_COMPLETED
        )
        for task in done:
            collected.append(task.result())
    return collected if args.partial_rollout else []


# ---- the trainer ---------------------------------------------------------------------------------


def validate_rollout_ids(node: Any, depth: int = 0) -> None:
    """A list of samples at depth >= 2 (prompt x rollout x samples of one rollout) is a fan-out:
    every member needs the same non-None ``rollout_id``."""
    if isinstance(node, Sample):
        return
    assert isinstance(node, list), f"unexpected node {type(node).__name__}"
    if depth >= 2 and node and all(isinstance(x, Sample) for x in node):
        ids = {s.rollout_id for s in node}
        assert None not in ids, "a fanned-out sample has no rollout_id"
        assert len(ids) == 1, f"siblings carry several rollout ids: {ids}"
        return
    for child in node:
        validate_rollout_ids(child, depth + 1)


def flatten(data: list[Any]) -> list[Sample]:
    while data and isinstance(data[0], list):
        data = list(itertools.chain.from_iterable(data))
    return data


def post_process_rewards(args: Any, samples: list[Sample]) -> tuple[list[Any], list[float]]:
    import torch

    if args.custom_reward_post_process_path:
        return load_function(args.custom_reward_post_process_path)(args, samples)
    raw = [s.get_reward_value(args) for s in samples]
    if args.advantage_estimator in NORMALIZED and args.rewards_normalization:
        rewards = torch.tensor(raw, dtype=torch.float)
        if rewards.shape[-1] == args.n_samples_per_prompt * args.rollout_batch_size:
            rewards = rewards.reshape(-1, args.n_samples_per_prompt)
        else:  # groups of unequal size: one batch-wide row
            rewards = rewards.view(-1, rewards.shape[-1])
        rewards = rewards - rewards.mean(dim=-1, keepdim=True)
        if args.advantage_estimator in STD_NORMALIZED and args.grpo_std_normalization:
            rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
        return raw, rewards.flatten().tolist()
    return raw, raw


def convert_samples_to_train_data(args: Any, samples: list[Sample]) -> dict[str, list[Any]]:
    raw, rewards = post_process_rewards(args, samples)
    assert len(raw) == len(samples)
    assert len(rewards) == len(samples)
    rollout_ids = [s.rollout_id for s in samples]
    taken = {r for r in rollout_ids if r is not None}
    free = 0
    for i, rid in enumerate(rollout_ids):
        if rid is None:
            while free in taken:
                free += 1
            rollout_ids[i] = free
            taken.add(free)
    data: dict[str, list[Any]] = {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "rewards": rewards,
        "raw_reward": raw,
        "truncated": [1 if s.status == Sample.Status.TRUNCATED else 0 for s in samples],
        "sample_indices": [s.index for s in samples],
        "rollout_ids": rollout_ids,
    }
    masks = []
    for s in samples:
        if s.loss_mask is None:
            s.loss_mask = [1] * s.response_length
        assert len(s.loss_mask) == s.response_length, "loss mask length != response length"
        if s.remove_sample:
            s.loss_mask = [0] * s.response_length
        masks.append(s.loss_mask)
    data["loss_masks"] = masks
    totals: dict[Any, int] = {}
    for rid, mask in zip(rollout_ids, masks, strict=True):
        totals[rid] = totals.get(rid, 0) + sum(mask)
    data["rollout_mask_sums"] = [totals[rid] for rid in rollout_ids]
    if samples[0].rollout_log_probs is not None:
        data["rollout_log_probs"] = [s.rollout_log_probs for s in samples]
    if samples[0].train_metadata is not None:
        data["metadata"] = [s.train_metadata for s in samples]
    if samples[0].teacher_log_probs is not None:
        data["teacher_log_probs"] = [s.teacher_log_probs for s in samples]
    return data

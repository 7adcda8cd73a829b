"""The native loop's view of slime's call path: thin wrappers over the one slime stand-in
(``tests/support/slime_stand_in.py``) for tests that drive a single sample, plus the user reward
model of the calculator env (named by ``--custom-rm-path slime_path.calc_reward``)."""

from __future__ import annotations

import re
import types
from typing import Any

from support.slime_stand_in import GenerateState, Sample, convert_samples_to_train_data
from support.slime_stand_in import generate_and_rm as _generate_and_rm

SlimeSample = Sample
RM_CALLS: list[Any] = []  # every sample slime's reward model scored, across calls

# The trainer's reward settings for these tests: no normalisation, no custom post-processing.
TRAINER_ARGS = types.SimpleNamespace(
    custom_reward_post_process_path=None,
    advantage_estimator="grpo",
    rewards_normalization=False,
    grpo_std_normalization=False,
    n_samples_per_prompt=1,
    rollout_batch_size=1,
    reward_key=None,
)


async def generate_and_rm(
    args: Any, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False
) -> Sample | list[Sample]:
    """slime's ``generate_and_rm`` for one sample, with a fresh per-process state."""
    if not hasattr(args, "sglang_server_concurrency"):
        args.sglang_server_concurrency = 64
    state = GenerateState(args)
    try:
        return await _generate_and_rm(
            args, sample, sampling_params, evaluation=evaluation, state=state
        )
    finally:
        RM_CALLS.extend(state.rm_calls)


def train_data(samples: list[Sample]) -> dict[str, list[Any]]:
    """slime's conversion to training data (its length checks and flags)."""
    return convert_samples_to_train_data(TRAINER_ARGS, samples)


async def calc_reward(args: Any, sample: Sample) -> float:
    """A user's reward model for calc_env: the last ``answer`` value in the response text."""
    found = re.findall(r'"name": "answer", "arguments": \{"value": (-?\d+)\}', sample.response)
    return 1.0 if found and int(found[-1]) == sample.label else 0.0

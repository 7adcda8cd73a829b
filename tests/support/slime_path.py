"""The native loop's view of slime's call path, through slime's own code
(:mod:`support.slime_vendor`): its ``generate_and_rm`` for one sample and its trainer's
conversion into train data, plus the user reward model of the calculator env (named by
``--custom-rm-path support.slime_path.calc_reward``)."""

from __future__ import annotations

import re
from typing import Any

from support.slime_vendor import fresh_state, slime, slime_args, trainer

SlimeSample = slime().Sample
RM_CALLS: list[Any] = []  # every sample the user's reward model scored, across calls
REWARD_CALLS: list[Any] = []  # what slime handed our reward hook, call by call

# The trainer's reward settings for these tests: no normalisation, no custom post-processing.
TRAINER_FIELDS = {
    "custom_reward_post_process_path": None,
    "advantage_estimator": "grpo",
    "rewards_normalization": False,
    "grpo_std_normalization": False,
    "n_samples_per_prompt": 1,
    "rollout_batch_size": 1,
}


def with_slime_defaults(args: Any) -> Any:
    """``args`` with slime's parser defaults for every field the test did not set."""
    for key, value in vars(slime_args()).items():
        if not hasattr(args, key):
            setattr(args, key, value)
    return args


async def generate_and_rm(
    args: Any,
    sample: Any,
    sampling_params: dict[str, Any],
    evaluation: bool = False,
    state_checkpoint: str | None = None,
) -> Any:
    """slime's own ``generate_and_rm`` for one sample, with a fresh per-process state
    (``state_checkpoint``: see :func:`support.slime_vendor.fresh_state`)."""
    with_slime_defaults(args)
    fresh_state(args, state_checkpoint)
    return await slime().sglang_rollout.generate_and_rm(
        args, sample, dict(sampling_params), evaluation=evaluation
    )


def train_data(samples: list[Any]) -> dict[str, list[Any]]:
    """slime's own conversion to training data (its length checks and flags)."""
    return trainer(slime_args(**TRAINER_FIELDS))._convert_samples_to_train_data(samples)


async def calc_reward(args: Any, sample: Any) -> float:
    """A user's reward model for calc_env: the last ``answer`` value in the response text."""
    RM_CALLS.append(sample)
    found = re.findall(r'"name": "answer", "arguments": \{"value": (-?\d+)\}', sample.response)
    return 1.0 if found and int(found[-1]) == sample.label else 0.0


async def recorded_reward(args: Any, samples: Any) -> Any:
    """``--custom-rm-path support.slime_path.recorded_reward``: our hook
    (``coding_agent_rl.generate.reward``), with each call slime makes recorded."""
    from coding_agent_rl.generate import reward

    REWARD_CALLS.append(samples)
    return await reward(args, samples)

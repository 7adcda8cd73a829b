"""A faithful stand-in of slime's rollout call path (slime cannot be installed here: the PyPI
``slime`` is another project), written from /work/shared/docs/facts-slime.md, not from slime's code.

* :class:`SlimeSample` is shaped like ``slime.utils.types.Sample``: a dataclass with a *plain*
  ``enum.Enum`` ``Status`` nested in it (members compare by identity: a member of any other enum,
  even a ``str`` enum with the same values, is unequal), the same field names and defaults.
* :func:`generate_and_rm` follows slime's branches: load the custom generate function by its
  dotted path, pass ``evaluation=`` only when its signature has it; a list with any ABORTED member
  is returned without reward; otherwise every sample whose ``reward`` is None goes through the
  custom reward model.
* :func:`train_data` mirrors the checks slime's conversion to training data makes (mask / log
  prob lengths against ``response_length``, the truncated flag from ``Status.TRUNCATED``).

R2-3 writes a fuller stand-in; the two are to be unified at merge.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
from typing import Any


@dataclasses.dataclass
class SlimeSample:
    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, Any]] = ""
    tokens: list[int] = dataclasses.field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = dataclasses.field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None
    status: Status = Status.PENDING
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    train_metadata: dict[str, Any] | None = None
    non_generation_time: float = 0.0
    session_id: str | None = None
    rollout_id: int | str | None = None


def load_function(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


RM_CALLS: list[Any] = []


async def generate_and_rm(
    args: Any, sample: SlimeSample, sampling_params: dict[str, Any], evaluation: bool = False
) -> SlimeSample | list[SlimeSample]:
    fn = load_function(args.custom_generate_function_path)
    kwargs = {"evaluation": evaluation} if "evaluation" in inspect.signature(fn).parameters else {}
    out = await fn(args, sample, sampling_params, **kwargs)
    samples = out if isinstance(out, list) else [out]
    if any(s.status == SlimeSample.Status.ABORTED for s in samples):
        return out
    rm = load_function(args.custom_rm_path)
    for s in samples:
        if s.reward is None:
            RM_CALLS.append(s)
            s.reward = await rm(args, s)
    return out


def train_data(samples: list[SlimeSample]) -> dict[str, list[Any]]:
    """What slime's conversion to training data reads, with its length checks."""
    out: dict[str, list[Any]] = {"tokens": [], "loss_masks": [], "rewards": [], "truncated": []}
    for s in samples:
        assert len(s.loss_mask) == s.response_length, "loss mask length"
        assert len(s.rollout_log_probs) == s.response_length, "log prob length"
        assert s.tokens[-s.response_length :] and s.response_length <= len(s.tokens)
        out["tokens"].append(s.tokens)
        out["loss_masks"].append(s.loss_mask)
        out["rewards"].append(s.reward)
        out["truncated"].append(1 if s.status == SlimeSample.Status.TRUNCATED else 0)
    return out


async def calc_reward(args: Any, sample: SlimeSample) -> float:
    """A user's reward model for calc_env: the last ``answer`` value in the response text."""
    found = re.findall(r'"name": "answer", "arguments": \{"value": (-?\d+)\}', sample.response)
    return 1.0 if found and int(found[-1]) == sample.label else 0.0

"""The environment contract of the native multi-turn loop: slime's ``BaseInteractionEnv``.

Built per sample by ``build_env(sample=..., args=...)``; the loop calls ``reset``, ``step`` per
turn, ``format_observation`` and ``close`` (plain or ``async``). :class:`FatalEnvError` ends an
episode as infrastructure; other errors are retried. The optional extensions this project reads
and the failure rules: docs/modules/env.md.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from coding_agent_rl.errors import EnvFailure, FailureKind


class EnvError(EnvFailure):
    """An environment failure that is not the model's. Retried within the turn's budget;
    ``reset=True`` makes the loop call ``env.reset()`` before the retry."""

    def __init__(self, message: str, *, reset: bool = False):
        super().__init__(message)
        self.reset = reset


class FatalEnvError(EnvError):
    """An environment failure that retrying cannot fix (e.g. its sandbox is gone)."""


@dataclasses.dataclass
class EnvOutcome:
    """What ``evaluate()`` returns: the reward and how to attribute a failure.

    ``failure_kind``: None (solved, or a plain reward), ``"model"`` (the policy's outcome, kept
    for training with its reward) or ``"infra"`` (dropped from training; retried by the runner).
    ``record``: extra fields for the rollout's ``results.jsonl`` line (F2P/P2P counts, ...).
    """

    reward: float | None
    failure_kind: FailureKind | None = None
    reason: str | None = None
    record: dict[str, Any] = dataclasses.field(default_factory=dict)


class BaseInteractionEnv:
    """The base class of native-loop environments (slime's shape; see the module docstring)."""

    def reset(self) -> Any:
        raise NotImplementedError

    def step(self, response_text: str) -> Any:
        raise NotImplementedError

    def close(self) -> Any:
        return None

    def format_observation(self, observation: dict[str, Any] | None) -> dict[str, Any]:
        """slime's rule: every image of ``multi_modal_data`` first, then ``obs_str`` as text."""
        observation = observation or {}
        content: list[dict[str, Any]] = []
        for images in (observation.get("multi_modal_data") or {}).values():
            content.extend({"type": "image", "image": image} for image in images)
        content.append({"type": "text", "text": str(observation.get("obs_str", ""))})
        return {"role": "user", "content": content}


async def call(fn: Any, *args: Any) -> Any:
    """Call a plain or async environment method and return its result."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def split_step(result: Any) -> tuple[Any, bool, dict[str, Any]]:
    """Check a ``step`` return value: ``(observation, done, info)``; ``ValueError`` otherwise."""
    if not (isinstance(result, tuple) and len(result) == 3):
        raise ValueError(
            f"env.step must return (observation, done, info), got {type(result).__name__}"
        )
    observation, done, info = result
    return observation, bool(done), info if isinstance(info, dict) else {}


def split_reset(result: Any) -> tuple[Any, dict[str, Any]]:
    """``reset`` returns ``(observation, info)``; a bare observation (or None) is accepted."""
    if isinstance(result, tuple) and len(result) == 2:
        observation, info = result
        return observation, info if isinstance(info, dict) else {}
    return result, {}

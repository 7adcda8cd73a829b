"""What one rollout is configured with, and what it returns."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Literal

from coding_agent_rl.settings import Settings, default
from coding_agent_rl.types import Sample


@dataclasses.dataclass
class RolloutConfig:
    backend: str = default("sandbox")
    sandbox_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    agent_budget_s: float = default("agent_budget_s")
    eval_timeout_s: float = default("eval_timeout_s")
    # Whole-rollout guard; default agent + 2 x eval (a control run may repeat the tests) + 600 s
    # (sandboxes, diff capture: the rest of the rollout, which the agent must not push over it).
    deadline_s: float | None = None
    infra_retries: int = 1
    reward_mode: Literal["full", "split"] = default("reward_mode")
    max_context: int | None = None
    # Response tokens per sample (slime's rollout_max_response_len): a longer sample is cut and
    # marked TRUNCATED ("response").
    max_response: int | None = None
    max_turns: int | None = None
    prompt_template: str | None = None
    model_name: str = default("model_name")
    out_dir: pathlib.Path | None = None  # per-rollout artifacts (diff, agent log, test log)
    # Bind-mount the agent CLI from the host cache (where the backend can:
    # ``Sandbox.supports_bind_mounts``) instead of uploading it into every sandbox.
    mount_agent: bool = True
    # Create and prepare the grading sandbox while the agent runs. None: on where an idle
    # sandbox costs nothing (``Sandbox.idle_is_free``); off where it is billed per second.
    grade_ahead: bool | None = None
    # What the agent sandbox can reach (rollout/isolation.py): adapter-only | open | none;
    # None: $CODING_AGENT_RL_AGENT_NETWORK, else adapter-only.
    agent_network: str | None = None
    # How often the agent sandbox's limits are checked while the agent runs (a breach ends the
    # rollout as the model's failure, naming the limit).
    limits_poll_s: float = 1.0
    # The static tamper screen's policy: "zero" (a finding scores 0) or "flag" (recorded only).
    tamper_policy: Literal["zero", "flag"] = default("tamper_policy")
    # Grade twice in fresh sandboxes (independent blinding and canaries); outcomes must agree.
    twin_grade: bool = default("twin_grade")
    # The reward of a result with tampering evidence (0; -1 makes forging lose in expectation).
    tamper_reward: float = default("tamper_reward")
    # Agent sandboxes prepared ahead (rollout/prepare.py, docs/sandbox-pool.md); group_size:
    # rollouts per task (a GRPO group), when known.
    pool_size: int | None = default("pool_size")  # None: none here (``run`` sizes it)
    pool_idle_s: float = default("pool_idle_s")
    fork_groups: bool = default("fork_groups")
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.tamper_policy not in ("zero", "flag"):
            raise ValueError(f"tamper_policy {self.tamper_policy!r}: expected zero or flag")

    @property
    def deadline(self) -> float:
        return self.deadline_s or self.agent_budget_s + 2 * self.eval_timeout_s + 600.0

    @classmethod
    def from_settings(cls, conf: Settings, **overrides: Any) -> RolloutConfig:
        """Every field named like a setting takes the setting's value (``backend`` is
        ``sandbox``, ``deadline_s`` is ``rollout_deadline_s``); ``overrides`` win. A new rollout
        setting then needs only its settings field and its field here."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            name = SETTING_NAMES.get(field.name, field.name)
            if name in Settings.model_fields:
                value = getattr(conf, name)
                values[field.name] = dict(value) if isinstance(value, dict) else value
        return cls(**{**values, **overrides})


# RolloutConfig fields whose setting has another name.
SETTING_NAMES = {"backend": "sandbox", "deadline_s": "rollout_deadline_s"}


@dataclasses.dataclass
class RolloutOutcome:
    samples: list[Sample]
    record: dict[str, Any]  # one line of results.jsonl

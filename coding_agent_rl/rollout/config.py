"""What one rollout is configured with, and what it returns."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from coding_agent_rl.types import Sample

LOCAL_BACKENDS = ("docker", "local")  # sandboxes on this machine: an idle one costs nothing


@dataclasses.dataclass
class RolloutConfig:
    backend: str = "docker"
    sandbox_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    agent_budget_s: float = 1800.0
    eval_timeout_s: float = 600.0
    deadline_s: float | None = None  # whole-rollout guard; default agent + eval + 180 s
    infra_retries: int = 1
    reward_mode: str = "full"
    max_context: int | None = None
    max_turns: int | None = None
    prompt_template: str | None = None
    model_name: str = "policy"
    out_dir: pathlib.Path | None = None  # per-rollout artifacts (diff, agent log, test log)
    # Bind-mount the agent CLI from the host cache (Docker on this machine) instead of uploading
    # it into every sandbox.
    mount_agent: bool = True
    # Create and prepare the grading sandbox while the agent runs. None: on for sandboxes on
    # this machine (docker, local); off for remote ones, billed per sandbox-second.
    grade_ahead: bool | None = None
    # What the agent sandbox can reach (rollout/isolation.py): adapter-only | open | none;
    # None: $CODING_AGENT_RL_AGENT_NETWORK, else adapter-only.
    agent_network: str | None = None
    # How often the agent sandbox's limits are checked while the agent runs (a breach ends the
    # rollout as the model's failure, naming the limit).
    limits_poll_s: float = 1.0

    @property
    def deadline(self) -> float:
        return self.deadline_s or self.agent_budget_s + self.eval_timeout_s + 180.0


@dataclasses.dataclass
class RolloutOutcome:
    samples: list[Sample]
    record: dict[str, Any]  # one line of results.jsonl

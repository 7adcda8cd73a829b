"""Whose failure it is, once the agent has started: infra only on evidence the agent cannot
produce (see rollout/runner.py's module docstring for the whole policy).

The adapter records, per session, the errors it answered with ``infra: ...`` only when a health
probe of the policy server confirmed the failure; everything else (``request: ...``) the agent
could have provoked with its own key. A CLI that never got a reply to its first request never let
the model act: that is infra too. Artifacts copied from the rollout (diff, test log, after the
agent's log) share one byte budget, so nothing the agent writes can fill the host's disk.
"""

from __future__ import annotations

import pathlib
from typing import Any

from coding_agent_rl.errors import InfraFailure
from coding_agent_rl.harness import AgentRun
from coding_agent_rl.rollout.record import RolloutRecord
from coding_agent_rl.trajectory.turn import Turn

ARTIFACT_BUDGET = 6 * 1024 * 1024  # bytes of artifacts one rollout may write


def check_agent(
    errors: list[str], agent: AgentRun, turns: list[Turn], record: RolloutRecord
) -> None:
    """Raise :class:`InfraFailure` when the agent's run ended on evidence of ours: a confirmed
    policy-server failure it then exited on, or no model turn at all."""
    confirmed = [e for e in errors if e.startswith("infra: ")]
    if errors:
        record.set(adapter_errors=[e[:300] for e in errors[-5:]])
    if confirmed and agent.exit_code != 0:
        raise InfraFailure(
            f"policy server failed {len(confirmed)}x (last: {confirmed[-1][:200]}); "
            f"agent exited {agent.exit_code}",
            stage="policy",
        )
    if not turns:  # the CLI never got a reply to its first request: the model never acted
        tail = (agent.log_tail or "")[-300:]
        last = f"; adapter: {errors[-1][:200]}" if errors else ""
        raise InfraFailure(
            f"agent made no model call (exit {agent.exit_code}){last}: {tail}", stage="agent"
        )


def file_size(path: Any) -> int:
    try:
        return pathlib.Path(path).stat().st_size if path else 0
    except OSError:
        return 0


class ArtifactBudget:
    """What is left of one rollout's :data:`ARTIFACT_BUDGET` (``spent``: already written)."""

    def __init__(self, total: int = ARTIFACT_BUDGET, spent: int = 0):
        self.left = total - spent

    def write(self, folder: pathlib.Path | None, name: str, data: str | bytes | None) -> None:
        """Write an artifact within the budget, keeping its tail behind a marker."""
        if folder is None or data is None:
            return
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "replace")
        left = max(0, self.left)
        if len(raw) > left:
            marker = f"[... {len(raw) - left} bytes dropped: the rollout's artifact budget ...]\n"
            raw = marker.encode() + (raw[-left:] if left else b"")
        self.left -= len(raw)
        (folder / name).write_bytes(raw)

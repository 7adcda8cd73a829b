"""The agent sandbox's workspace, as ``run`` prepares it before the agent starts.

One function, used by the rollout runner and by ``validate`` (which must catch what a rollout
would trip on): pre_commands, the base snapshot, hidden paths removed, git history scrubbed to
the base, the problem statement written next to the code.
"""

from __future__ import annotations

from typing import Any

from coding_agent_rl.grading.workspace import prepare_workspace
from coding_agent_rl.rollout.prompt import PROBLEM_FILE
from coding_agent_rl.sandbox.base import Sandbox


async def prepare_agent_workspace(sb: Sandbox, row: Any) -> str:
    """Bring the agent's sandbox to the task's base; returns the base commit id. Raises
    :class:`~coding_agent_rl.grading.workspace.WorkspaceError` when the task's set-up fails."""
    return await prepare_workspace(
        sb, row, agent=True, files={f"{row.workdir}/{PROBLEM_FILE}": row.problem_statement}
    )

"""Grading: capture the agent's diff, grade it in a fresh sandbox, resist reward hacking.

Agent side: ``base = await prepare_workspace(sb, row, agent=True)`` (pre_commands, snapshot,
hidden paths removed, git scrubbed), the agent works, ``await capture_diff(sb, row.workdir,
base_commit=base)``. Grader side: ``await grade(row, diff.text)`` -> :class:`GradeResult`, or
with a :class:`GradingSandbox` created and prepared while the agent works:
``await grade(row, diff.text, sandbox=ahead)``.
Note that ``coding_agent_rl.grading.grade`` is the function; the module is reached with
``importlib.import_module("coding_agent_rl.grading.grade")``.
"""

from coding_agent_rl.grading.diff import CapturedDiff, DiffCaptureError, capture_diff
from coding_agent_rl.grading.grade import grade
from coding_agent_rl.grading.prepared import GradingSandbox
from coding_agent_rl.grading.result import GradeResult
from coding_agent_rl.grading.scrub import scrub_git
from coding_agent_rl.grading.workspace import WorkspaceError, prepare_workspace

__all__ = [
    "CapturedDiff",
    "DiffCaptureError",
    "GradeResult",
    "GradingSandbox",
    "WorkspaceError",
    "capture_diff",
    "grade",
    "prepare_workspace",
    "scrub_git",
]

"""Grading: capture the agent's diff, grade it in a fresh sandbox, resist reward hacking.

Agent side: ``prepare_workspace(sb, row, agent=True)``, then ``capture_diff``. Grader side:
``await grade(row, diff.text)`` -> :class:`GradeResult` (optionally with a :class:`GradingSandbox`
prepared while the agent works). The tamper defences, what remains possible and the robustness
rules: docs/modules/grading.md and docs/grading.md.
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

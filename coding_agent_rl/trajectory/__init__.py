"""Recorded turns -> message tree -> labelled, token-exact training samples."""

from coding_agent_rl.trajectory.reward import assign_reward, grpo_advantages
from coding_agent_rl.trajectory.samples import build_samples
from coding_agent_rl.trajectory.turn import Turn

__all__ = ["Turn", "assign_reward", "build_samples", "grpo_advantages"]

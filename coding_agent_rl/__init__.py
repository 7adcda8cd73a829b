"""coding-agent-rl: sandboxed coding-agent RL rollouts with token-exact training samples."""

__version__ = "0.1.0"

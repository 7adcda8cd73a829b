"""Agent CLI harnesses: ``get_harness("claude_code").install / configure / run`` in a sandbox.

Third parties add one with an entry point in the group ``coding_agent_rl.harnesses``
(``name = "pkg.module:HarnessClass"``).
"""

from __future__ import annotations

import inspect
from typing import Any

from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.context import AgentRun, HarnessConfigError, HarnessContext
from coding_agent_rl.harness.install import InstallError, InstallReport
from coding_agent_rl.harness.network import AdapterUnreachable
from coding_agent_rl.registry import Registry

HARNESSES = Registry(
    "agent harness",
    "coding_agent_rl.harnesses",
    {
        "claude_code": ("coding_agent_rl.harness.claude_code:ClaudeCode", None),
        "codex": ("coding_agent_rl.harness.codex:Codex", None),
        "opencode": ("coding_agent_rl.harness.opencode:OpenCode", None),
        "gemini_cli": ("coding_agent_rl.harness.gemini_cli:GeminiCli", None),
        "qwen_code": ("coding_agent_rl.harness.qwen_code:QwenCode", None),
        "pi": ("coding_agent_rl.harness.pi_coding_agent:PiCodingAgent", None),
        "mini_swe_agent": ("coding_agent_rl.harness.mini_swe_agent:MiniSweAgent", None),
    },
)


def get_harness(name: str, **config: Any) -> BaseHarness:
    """The harness ``name`` built with its options; unknown names or options raise ValueError."""
    cls = HARNESSES.load(name)
    valid = [p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs")]
    unknown = sorted(set(config) - set(valid))
    if unknown:
        raise HarnessConfigError(
            f"unknown option(s) {', '.join(unknown)} for harness {name!r}; valid: {', '.join(valid)}"
        )
    return cls(**config)


__all__ = [
    "HARNESSES",
    "AdapterUnreachable",
    "AgentRun",
    "BaseHarness",
    "HarnessConfigError",
    "HarnessContext",
    "InstallError",
    "InstallReport",
    "get_harness",
]

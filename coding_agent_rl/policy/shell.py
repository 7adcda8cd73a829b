"""Emit "run this shell command" as a call to whichever shell tool the agent CLI offers."""

from __future__ import annotations

import logging
from typing import Any

from coding_agent_rl.policy.base import PolicyEnv, Prompt

log = logging.getLogger(__name__)

# Shell tools of the agent CLIs we know, most specific first:
# Claude Code `Bash{command}`, Codex `exec_command{cmd}` / `shell{command: [argv]}`,
# mini-swe-agent `bash{command}`, and common generic names.
SHELL_TOOL_NAMES = (
    "Bash",
    "exec_command",
    "shell",
    "bash",
    "shell_command",
    "run_shell_command",
    "execute_bash",
    "run_command",
    "terminal",
)
COMMAND_PARAMS = ("command", "cmd", "script")


def shell_call(prompt: Prompt, command: str) -> tuple[str, dict[str, Any]] | None:
    """``(tool name, arguments)`` running ``command`` with the prompt's shell tool, or None."""
    offered = {spec["name"]: spec for spec in prompt.tools}
    for name in SHELL_TOOL_NAMES:
        spec = offered.get(name)
        if spec is None:
            continue
        props = (spec.get("parameters") or {}).get("properties") or {}
        param = next((p for p in COMMAND_PARAMS if p in props), None)
        if param is None and props:
            continue
        param = param or "command"
        if (props.get(param) or {}).get("type") == "array":  # argv form (Codex `shell`)
            return name, {param: ["bash", "-lc", command]}
        return name, {param: command}
    return None


def shell_text(prompt: Prompt, command: str, env: PolicyEnv) -> str:
    """The reply text calling the shell tool; a plain message if no shell tool is offered."""
    call = shell_call(prompt, command)
    if call is None:
        names = ", ".join(s["name"] for s in prompt.tools) or "none"
        log.warning("no shell tool among the offered tools (%s); answering with text", names)
        return f"I would run `{command}`, but no shell tool is available."
    return env.format_call(*call)

"""The coding environment's tools: ``bash``, ``file_editor`` (view / create / str_replace /
insert, in ``editor.py``) and ``submit``, executed in the task's sandbox as the unprivileged
agent user.

Everything the policy triggers runs *inside* the sandbox as that user, so the kernel enforces
its permissions: the editor never writes through the root-side file API (a symlink the policy
planted cannot redirect a root write), and ``bash`` never runs as root. Output is bounded
(head and tail kept around a marker), commands are bounded in time (the whole process group is
killed), and the editor refuses files over a size cap. A bad call is the model's mistake: its
result is an ``Error: ...`` text, never an exception.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from typing import Any

from coding_agent_rl.env.turns import preview
from coding_agent_rl.sandbox.base import Sandbox

q = shlex.quote
INLINE_BYTES = 48 * 1024  # base64 text per command line (Linux caps one argument at 128 KiB)
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")  # see editor.py
STAGING_DIR = "/tmp/.car-editor"  # created root-owned, mode 755, when the sandbox is prepared

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the repository and return its output "
            "(stdout and stderr, the exit code). Long output is cut in the middle.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "the bash command"},
                    "timeout": {"type": "integer", "description": "seconds (optional)"},
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "file_editor",
            "description": "View a file (with line numbers) or a directory; create a new file; "
            "replace one exact occurrence of old_str by new_str; insert new_str after line "
            "insert_line (0: at the top).",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": list(EDITOR_COMMANDS)},
                    "path": {"type": "string", "description": "absolute, or relative to the repo"},
                    "file_text": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                    "insert_line": {"type": "integer"},
                    "view_range": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["command", "path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Finish: your changes to the repository are evaluated as they are.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


@dataclasses.dataclass
class ToolLimits:
    bash_timeout_s: float = 120.0  # default per command
    bash_max_timeout_s: float = 600.0  # the most a call may ask for
    max_output_chars: int = 16_000  # per tool result
    max_file_bytes: int = 1024 * 1024  # the editor's cap


@dataclasses.dataclass
class ToolResult:
    text: str
    ok: bool = True
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    images: list[bytes] = dataclasses.field(default_factory=list)  # shown after the text


def error(message: str, **info: Any) -> ToolResult:
    return ToolResult(f"Error: {message}", ok=False, info=info)


@dataclasses.dataclass
class Workspace:
    """Where the tools act: the sandbox, the agent user and the repository."""

    sb: Sandbox
    user: str
    home: str
    workdir: str
    limits: ToolLimits

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": self.home,
            "USER": self.user,
            "LOGNAME": self.user,
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "TERM": "dumb",
        }

    async def run(self, script: str, timeout: float = 120.0) -> Any:
        """``script`` as the agent user in the workdir (never retried: it may have effects)."""
        return await self.sb.exec(
            script,
            user=self.user,
            cwd=self.workdir,
            env=self.env,
            timeout=timeout,
            idempotent=False,
        )

    def path(self, raw: Any) -> str | None:
        if not isinstance(raw, str) or not raw.strip() or "\0" in raw:
            return None
        return posixpath.normpath(posixpath.join(self.workdir, raw.strip()))


async def run_bash(ws: Workspace, args: dict[str, Any]) -> ToolResult:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return error("bash needs a non-empty 'command' string")
    timeout = args.get("timeout", ws.limits.bash_timeout_s)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        return error("'timeout' must be a positive number of seconds")
    timeout = min(float(timeout), ws.limits.bash_max_timeout_s)
    # One stream, in the order the command wrote it; coreutils' timeout kills the command's
    # whole process group at the deadline (the sandbox's own exec timeout is the backstop).
    r = await ws.run(_BASH.format(t=f"{timeout:g}", cmd=q(command)), timeout=timeout + KILL_GRACE_S)
    timed_out = r.timed_out or (r.exit_code in (124, 137) and r.duration_s >= timeout - 0.05)
    if timed_out:  # and whatever escaped the group (setsid, nohup): every process of the agent
        await ws.run("kill -KILL -1 2>/dev/null; true", timeout=30)
    out = preview(r.stdout, ws.limits.max_output_chars)
    out = out[:-1] if out.endswith("\n") else out
    if timed_out:
        tail = f"[timed out after {timeout:g} s: the command was killed]"
    else:
        tail = f"[exit code {r.exit_code}]"
    return ToolResult(
        f"{out}\n{tail}" if out else tail,
        ok=r.exit_code == 0 and not timed_out,
        info={"exit_code": r.exit_code, "timed_out": timed_out},
    )


KILL_GRACE_S = 10.0
_BASH = """exec 2>&1
if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 {t} bash -c {cmd}; fi
exec bash -c {cmd}
"""

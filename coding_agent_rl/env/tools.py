"""The coding environment's tools: ``bash``, ``file_editor`` (view / create / str_replace /
insert) and ``submit``, executed in the task's sandbox as the unprivileged agent user.

Everything the policy triggers runs *inside* the sandbox as that user, so the kernel enforces
its permissions: the editor never writes through the root-side file API (a symlink the policy
planted cannot redirect a root write), and ``bash`` never runs as root. Output is bounded
(head and tail kept around a marker), commands are bounded in time (the whole process group is
killed), and the editor refuses files over a size cap. A bad call is the model's mistake: its
result is an ``Error: ...`` text, never an exception.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import posixpath
import secrets
import shlex
from typing import Any

from coding_agent_rl.env.turns import preview
from coding_agent_rl.sandbox.base import Sandbox

q = shlex.quote
INLINE_BYTES = 48 * 1024  # base64 text per command line (Linux caps one argument at 128 KiB)
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")
SNIPPET_LINES = 4  # context lines shown around an edit
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


_READ = """p={path}
if [ -d "$p" ]; then echo CAR-DIR; find "$p" -maxdepth 2 -not -path '*/.*' 2>/dev/null | LC_ALL=C sort | head -n 1000; exit 0; fi
[ -e "$p" ] || {{ echo CAR-MISSING; exit 0; }}
[ -f "$p" ] || {{ echo CAR-SPECIAL; exit 0; }}
[ -r "$p" ] || {{ echo CAR-DENIED; exit 0; }}
size=$(stat -c %s -- "$p")
[ "$size" -le {cap} ] || {{ echo "CAR-BIG $size"; exit 0; }}
echo CAR-FILE; base64 -w0 -- "$p"
"""


async def _read(ws: Workspace, path: str) -> tuple[str, bytes | str]:
    """``("file", bytes)``, ``("dir", listing)`` or ``(kind, message)`` for what cannot be read."""
    r = await ws.run(_READ.format(path=q(path), cap=ws.limits.max_file_bytes))
    head, _, rest = r.stdout.partition("\n")
    if head == "CAR-FILE":
        try:
            return "file", base64.b64decode(rest.strip(), validate=True)
        except binascii.Error:
            return "error", f"{path} could not be read"
    if head == "CAR-DIR":
        return "dir", rest
    messages = {
        "CAR-MISSING": f"{path} does not exist",
        "CAR-SPECIAL": f"{path} is not a regular file",
        "CAR-DENIED": f"permission denied: {path}",
    }
    if head.startswith("CAR-BIG"):
        size = head.split()[-1]
        return "error", f"{path} is {size} bytes, over the editor's {ws.limits.max_file_bytes}"
    return "error", messages.get(head) or f"{path} could not be read: {r.stdout[-300:]}"


async def _write(ws: Workspace, path: str, data: bytes, *, new: bool) -> str | None:
    """Write ``data`` to ``path`` as the agent user; an error message, or None."""
    b64 = base64.b64encode(data).decode()
    noclobber = "set -C; " if new else ""
    if len(b64) <= INLINE_BYTES:
        source = f"printf %s {q(b64)} | base64 -d"
        staged = None
    else:  # too long for one command line: staged in a root-owned folder the agent may read
        staged = f"{STAGING_DIR}/{secrets.token_hex(8)}.b64"
        await ws.sb.write_file(staged, b64, mode=0o644)
        source = f"base64 -d < {q(staged)}"
    r = await ws.run(f'p={q(path)}; mkdir -p -- "$(dirname -- "$p")" && {noclobber}{source} > "$p"')
    if staged is not None:
        await ws.sb.exec(f"rm -f -- {q(staged)}")
    if r.ok:
        return None
    why = r.stdout.strip() or r.stderr.strip() or f"exit {r.exit_code}"
    return f"cannot write {path}: {why[-300:]}"


def numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:6}\t{line}" for i, line in enumerate(lines))


def _snippet(text: str, at_line: int, span: int) -> str:
    lines = text.split("\n")
    lo = max(0, at_line - SNIPPET_LINES)
    hi = min(len(lines), at_line + span + SNIPPET_LINES)
    return numbered(lines[lo:hi], lo + 1)


async def run_editor(ws: Workspace, args: dict[str, Any]) -> ToolResult:
    command = args.get("command")
    if command not in EDITOR_COMMANDS:
        return error(f"file_editor 'command' must be one of {', '.join(EDITOR_COMMANDS)}")
    path = ws.path(args.get("path"))
    if path is None:
        return error("file_editor needs a 'path' string")
    if command == "create":
        text = args.get("file_text")
        if not isinstance(text, str):
            return error("create needs 'file_text' (a string)")
        failed = await _write(ws, path, text.encode(), new=True)
        return error(failed) if failed else ToolResult(f"Created {path}.")
    kind, data = await _read(ws, path)
    if kind == "error":
        return error(str(data))
    if kind == "dir":
        if command != "view":
            return error(f"{path} is a directory")
        return ToolResult(preview(f"Files under {path}:\n{data}", ws.limits.max_output_chars))
    assert isinstance(data, bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return error(f"{path} is not a UTF-8 text file")
    if command == "view":
        return _view(ws, path, text, args.get("view_range"))
    if command == "str_replace":
        return await _replace(ws, path, text, args)
    return await _insert(ws, path, text, args)


def _view(ws: Workspace, path: str, text: str, view_range: Any) -> ToolResult:
    lines = text.split("\n")
    first, last = 1, len(lines)
    if view_range is not None:
        ok = (
            isinstance(view_range, list)
            and len(view_range) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in view_range)
        )
        if not ok:
            return error("'view_range' must be [first_line, last_line] (last -1: to the end)")
        first, last = view_range[0], (len(lines) if view_range[1] == -1 else view_range[1])
        if not 1 <= first <= last <= len(lines):
            return error(f"'view_range' {view_range} is outside 1..{len(lines)}")
    body = numbered(lines[first - 1 : last], first)
    return ToolResult(preview(body, ws.limits.max_output_chars))


async def _replace(ws: Workspace, path: str, text: str, args: dict[str, Any]) -> ToolResult:
    old, new = args.get("old_str"), args.get("new_str", "")
    if not isinstance(old, str) or not old:
        return error("str_replace needs a non-empty 'old_str'")
    if not isinstance(new, str):
        return error("'new_str' must be a string")
    count = text.count(old)
    if count != 1:
        where = "not found" if count == 0 else f"found {count} times (it must be unique)"
        return error(f"old_str {where} in {path}")
    at = text.index(old)
    result = text[:at] + new + text[at + len(old) :]
    failed = await _write(ws, path, result.encode(), new=False)
    if failed:
        return error(failed)
    line = text.count("\n", 0, at)
    snippet = _snippet(result, line, new.count("\n") + 1)
    return ToolResult(f"Edited {path}:\n{preview(snippet, ws.limits.max_output_chars)}")


async def _insert(ws: Workspace, path: str, text: str, args: dict[str, Any]) -> ToolResult:
    line, new = args.get("insert_line"), args.get("new_str")
    if not isinstance(new, str):
        return error("insert needs 'new_str' (a string)")
    lines = text.splitlines(keepends=True)
    if not isinstance(line, int) or isinstance(line, bool) or not 0 <= line <= len(lines):
        return error(f"'insert_line' must be an integer in 0..{len(lines)}")
    if line and not lines[line - 1].endswith("\n"):
        lines[line - 1] += "\n"
    block = new if new.endswith("\n") else new + "\n"
    result = "".join([*lines[:line], block, *lines[line:]])
    failed = await _write(ws, path, result.encode(), new=False)
    if failed:
        return error(failed)
    snippet = _snippet(result, line, block.count("\n"))
    return ToolResult(f"Inserted into {path}:\n{preview(snippet, ws.limits.max_output_chars)}")

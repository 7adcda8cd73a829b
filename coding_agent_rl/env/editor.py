"""The ``file_editor`` tool: view / create / str_replace / insert, as the agent user.

Reads and writes run *inside* the sandbox as the unprivileged agent user (``Workspace.run``), so
the kernel enforces its permissions: a symlink the policy planted (to a file or a folder) cannot
redirect a write to a root-owned file, as a root-side write through the sandbox's file API
would. ``view`` of an image file (PNG, JPEG, GIF, WebP) returns the image itself, as an agent
CLI's file reader does: a VLM policy sees it, a text-only one reads its placeholder. Content travels base64-encoded on the command line, or, when too long for one argument,
through a root-owned staging folder the agent may read but not change. Files over the size cap
and non-UTF-8 files are refused; every mistake is an ``Error: ...`` result.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

from coding_agent_rl.env.tools import (
    EDITOR_COMMANDS,
    INLINE_BYTES,
    STAGING_DIR,
    ToolResult,
    Workspace,
    error,
    q,
)
from coding_agent_rl.env.turns import preview

SNIPPET_LINES = 4  # context lines shown around an edit
IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"RIFF")


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
        listing = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        return ToolResult(preview(f"Files under {path}:\n{listing}", ws.limits.max_output_chars))
    assert isinstance(data, bytes)
    if command == "view" and data.startswith(IMAGE_MAGIC):
        return ToolResult(f"Image {path} ({len(data)} bytes):", images=[data])
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

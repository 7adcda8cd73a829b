"""Reverse a git patch as text (SWE-smith ships the bug-introducing diff; the fix is its reverse)."""

from __future__ import annotations

import re

from coding_agent_rl.patches.files import FilePatch, split_patch

_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$", re.DOTALL)
_SWAPS = {
    "new file mode ": "deleted file mode ",
    "deleted file mode ": "new file mode ",
    "old mode ": "new mode ",
    "new mode ": "old mode ",
    "rename from ": "rename to ",
    "rename to ": "rename from ",
}


def reverse_patch(text: str) -> str:
    """The patch that undoes ``text`` (text hunks, renames, modes; not binary or copies)."""
    out: list[str] = []
    for fp in split_patch(text):
        lines = fp.text.splitlines(keepends=True)
        in_hunk = False
        minus = plus = None
        for ln in lines:
            if ln.startswith("GIT binary patch") or ln.startswith(("copy from ", "copy to ")):
                raise ValueError(f"cannot reverse a binary or copy section ({fp.paths})")
            if ln.startswith("diff --git "):
                out.append(_reverse_git_header(fp))
                in_hunk = False
                continue
            m = _HUNK.match(ln)
            if m:
                in_hunk = True
                out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}")
                continue
            if in_hunk and ln[:1] in ("+", "-"):
                out.append(("-" if ln[0] == "+" else "+") + ln[1:])
                continue
            if in_hunk and ln[:1] in (" ", "\\", "\n"):
                out.append(ln)
                continue
            in_hunk = False
            if ln.startswith("--- "):
                minus = ln[4:]
                continue
            if ln.startswith("+++ "):
                plus = ln[4:]
                out.append("--- " + _swap_ab(plus, "a/"))
                out.append("+++ " + _swap_ab(minus or "/dev/null\n", "b/"))
                continue
            if ln.startswith("index "):
                m2 = re.match(r"index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$", ln, re.DOTALL)
                out.append(f"index {m2.group(2)}..{m2.group(1)}{m2.group(3)}" if m2 else ln)
                continue
            for prefix, repl in _SWAPS.items():
                if ln.startswith(prefix):
                    out.append(repl + ln[len(prefix) :])
                    break
            else:
                out.append(ln)
    return "".join(out)


def _swap_ab(value: str, prefix: str) -> str:
    if value.startswith("/dev/null"):
        return value
    if value.startswith('"'):
        return '"' + prefix + value[3:] if value[1:3] in ("a/", "b/") else value
    return prefix + value[2:] if value[:2] in ("a/", "b/") else value


def _reverse_git_header(fp: FilePatch) -> str:
    old = fp.old_path or fp.new_path
    new = fp.new_path or fp.old_path
    return f"diff --git {_quote('a/' + (new or ''))} {_quote('b/' + (old or ''))}\n"


def _quote(path: str) -> str:
    if re.search(r'[\x00-\x1f"\\\x7f]|[^\x00-\x7f]', path) is None:
        return path
    out = ['"']
    for b in path.encode("utf-8", "surrogateescape"):
        ch = chr(b)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    out.append('"')
    return "".join(out)

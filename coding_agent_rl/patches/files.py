"""Unified / git diffs as text: split per file, name the paths, drop protected files.

Paths are read the way git writes them: ``rename from/to`` and ``---``/``+++`` lines first, the
``diff --git`` header as a fallback (binary and mode-only sections have nothing else), with git's
C-style quoting (``"a/t\\303\\251st.py"``) undone. Protected-path patterns use gitignore-like
globs: a pattern without ``/`` matches the file name at any depth, ``**`` spans directories.

The agent writes every byte of a patch, so each function here is total: lines end at ``\n``
only (as git reads them: a U+2028 or ``\r`` inside a file name is part of the name, never a line
break), and a malformed quoted path or header is read as best it can be, never raised.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable

_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


@dataclasses.dataclass(frozen=True)
class FilePatch:
    """One file's section of a patch; ``None`` stands for ``/dev/null``."""

    old_path: str | None
    new_path: str | None
    text: str

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))


def lines_of(text: str) -> list[str]:
    """``text`` split after each ``\n`` only (``str.splitlines`` also splits on ``\r``, U+2028,
    U+0085 ..., which git does not)."""
    out = text.split("\n")
    last = out.pop()
    out = [ln + "\n" for ln in out]
    if last:
        out.append(last)
    return out


def _unquote(s: str) -> tuple[str, str]:
    """Parse a C-quoted string at the start of ``s``; returns (value, rest). An unterminated
    string is the rest of ``s`` (git never writes one; the agent may)."""
    out = bytearray()
    i = 1
    while i < len(s):
        c = s[i]
        if c == '"':
            return _decode(bytes(out)), s[i + 1 :]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n in "01234567" and re.match(r"[0-7]{3}", s[i + 1 : i + 4]):
                out.append(int(s[i + 1 : i + 4], 8))
                i += 4
                continue
            out.extend(bytes([_ESCAPES[n]]) if n in _ESCAPES else _char_bytes(n))
            i += 2
            continue
        out.extend(_char_bytes(c))
        i += 1
    return _decode(bytes(out)), ""


def _char_bytes(c: str) -> bytes:
    try:
        return c.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        return c.encode("utf-8", "surrogatepass")


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8", "surrogateescape")
    except UnicodeDecodeError:  # lone surrogates spelled out: keep them as they came
        return data.decode("utf-8", "surrogatepass")


def _path_token(s: str) -> str | None:
    """The path in a ``---``/``+++``/``rename`` line value, without prefix or timestamp."""
    s = s.rstrip("\n")
    if s.startswith('"'):
        s = _unquote(s)[0]
    elif "\t" in s:  # `--- a/x.py\t2024-01-01 ...` (diff -u style timestamps)
        s = s.split("\t", 1)[0]
    if s == "/dev/null":
        return None
    return s


def _strip_prefix(path: str | None) -> str | None:
    if path is None:
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def _git_header_paths(rest: str) -> tuple[str | None, str | None]:
    rest = rest.rstrip("\n")
    if rest.startswith('"'):
        a, tail = _unquote(rest)
        tail = tail.lstrip(" ")
        b = _unquote(tail)[0] if tail.startswith('"') else tail
        return _strip_prefix(a), _strip_prefix(b)
    if ' "' in rest:
        a, b = rest.split(' "', 1)
        return _strip_prefix(a), _strip_prefix(_unquote('"' + b)[0])
    # Unquoted and identical on both sides (no rename): "a/P b/P".
    half = (len(rest) - 1) // 2
    a, b = rest[:half], rest[half + 1 :]
    if a[2:] == b[2:]:
        return _strip_prefix(a), _strip_prefix(b)
    parts = rest.split(" b/", 1)
    return _strip_prefix(parts[0]), parts[1] if len(parts) == 2 else None


def split_patch(text: str) -> list[FilePatch]:
    """Split a patch into per-file sections (git format, or plain ``diff -u`` output)."""
    lines = lines_of(text)
    starts = [i for i, ln in enumerate(lines) if ln.startswith("diff --git ")]
    if not starts:  # plain unified diff: a section starts at a `---` line followed by `+++`
        starts = [
            i
            for i, ln in enumerate(lines)
            if ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        ]
    sections = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        sections.append(_section(lines[start:end]))
    return sections


def _section(lines: list[str]) -> FilePatch:
    old = new = None
    seen_old = seen_new = False
    header_old = header_new = None
    for ln in lines:
        if ln.startswith(("@@", "GIT binary patch")):
            break
        if ln.startswith("diff --git "):
            header_old, header_new = _git_header_paths(ln[len("diff --git ") :])
        elif ln.startswith(("rename from ", "copy from ")):
            old, seen_old = _path_token(ln.split(" ", 2)[2]), True
        elif ln.startswith(("rename to ", "copy to ")):
            new, seen_new = _path_token(ln.split(" ", 2)[2]), True
        elif ln.startswith("--- ") and not seen_old:
            old, seen_old = _strip_prefix(_path_token(ln[4:])), True
        elif ln.startswith("+++ ") and not seen_new:
            new, seen_new = _strip_prefix(_path_token(ln[4:])), True
    text = "".join(lines)
    if not seen_old:
        old = None if "\nnew file mode" in text.split("\n@@", 1)[0] else header_old
    if not seen_new:
        new = None if "\ndeleted file mode" in text.split("\n@@", 1)[0] else header_new
    return FilePatch(old_path=old, new_path=new, text=text)


def patch_paths(text: str) -> list[str]:
    """Every repository path a patch reads or writes, in order, without duplicates."""
    return list(dict.fromkeys(p for fp in split_patch(text) for p in fp.paths))


@functools.lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.lstrip("/")
    if pattern.endswith("/"):
        pattern += "**"
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end].replace("\\", "\\\\").replace("[", "\\[")
            out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out)
    return re.compile(("" if anchored else "(?:.*/)?") + body + "(?:/.*)?\\Z", re.DOTALL)


MAX_PATH = 4096  # PATH_MAX, in bytes: no file system takes a longer path


def path_matches(path: str, patterns: Iterable[str]) -> bool:
    """True when ``path`` (repository-relative) matches any pattern, or lies below one. A path
    longer than :data:`MAX_PATH` matches (it cannot be written; matching it would be slow)."""
    if len(path) > MAX_PATH or len(path.encode("utf-8", "surrogatepass")) > MAX_PATH:
        return True
    path = re.sub(r"/{2,}", "/", path)
    while path.startswith("./"):
        path = path[2:]
    return any(_glob_regex(p).match(path) for p in patterns)


def filter_patch(text: str, protected: Iterable[str]) -> tuple[str, list[str]]:
    """Drop every file section touching a protected path; returns (kept patch, dropped paths)."""
    protected = tuple(protected)
    kept, dropped = [], []
    for fp in split_patch(text):
        hits = [p for p in fp.paths if path_matches(p, protected)]
        if hits:
            dropped.extend(hits)
        else:
            kept.append(fp.text)
    return "".join(kept), list(dict.fromkeys(dropped))

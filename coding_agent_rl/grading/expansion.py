"""How many bytes a patch writes when applied: a bound checked on the host, before any sandbox.

A small patch can write a lot. Git's binary hunks are zlib-compressed: a 1.7 MB ``literal`` hunk
can inflate to 300 MB of zeros. Each hunk declares its inflated size (``literal N`` is the file's
size; ``delta N`` the size of the delta, whose own header, once inflated, states the size of the
file it produces — a small delta can copy a large range many times). ``copy from`` sections
duplicate a file the patch does not contain, so their size is unknown: they are refused (our own
diff capture never writes them). Text hunks write at most what the patch spells out.

:func:`expanded_size` adds these up; the grader refuses a patch over the cap as the model's
failure ("diff expands to N MiB"). The sandbox's own disk quota is the second line.
"""

from __future__ import annotations

import base64
import re
import zlib

from coding_agent_rl.errors import CodingAgentRLError
from coding_agent_rl.patches.files import lines_of, split_patch

DEFAULT_MAX_EXPANDED = 64 * 1024 * 1024


class Unbounded(CodingAgentRLError, ValueError):
    """The patch's effect on disk cannot be bounded (the message says why): the model's."""

    failure_kind = "model"
    default_stage = "grading"


def _line_bytes(line: str) -> bytes:
    """One line of git's base85 binary data: a length character, then the encoded bytes."""
    n = ord(line[0]) - (ord("A") - 1 if line[0] <= "Z" else ord("a") - 27)
    return base64.b85decode(line[1:].encode())[:n]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if not byte & 0x80:
            return value, pos
    raise Unbounded("a binary delta's header is cut short")


def _delta_target(lines: list[str], declared: int, cap: int) -> int:
    if declared > cap:
        return declared  # the delta itself is already over the cap
    try:
        compressed = b"".join(_line_bytes(ln) for ln in lines)
        d = zlib.decompressobj()
        head = d.decompress(compressed, 64)
    except (ValueError, zlib.error) as e:
        raise Unbounded(f"a binary delta does not decode ({e})") from None
    _, pos = _varint(head, 0)  # source size
    target, _ = _varint(head, pos)
    return target


def _binary_sizes(lines: list[str], cap: int) -> int:
    """Bytes written by the forward hunk of a ``GIT binary patch`` section (lines after it)."""
    head = lines[0].split()
    if (
        len(head) != 2
        or head[0] not in ("literal", "delta")
        or not re.fullmatch(r"[0-9]{1,18}", head[1])
    ):
        raise Unbounded(f"unreadable binary hunk header {lines[0][:40]!r}")
    data = []
    for ln in lines[1:]:
        if not ln.strip():
            break
        data.append(ln)
    declared = int(head[1])
    return declared if head[0] == "literal" else _delta_target(data, declared, cap)


def expanded_size(patch: str, cap: int = DEFAULT_MAX_EXPANDED) -> int:
    """An upper bound on the bytes ``patch`` writes into files; raises :class:`Unbounded`."""
    total = 0
    for fp in split_patch(patch):
        lines = [ln.removesuffix("\n") for ln in lines_of(fp.text)]
        if any(ln.startswith("copy from ") for ln in lines[:8]):
            raise Unbounded(f"it copies a file ({', '.join(fp.paths)}), which cannot be bounded")
        for i, ln in enumerate(lines):
            if ln.startswith("GIT binary patch"):
                if i + 1 < len(lines):
                    total += _binary_sizes(lines[i + 1 :], cap)
                break
            if ln.startswith("+") and not ln.startswith("+++ "):
                total += len(ln.encode("utf-8", "surrogateescape"))
    return total


def expansion_problem(patch: str, cap: int = DEFAULT_MAX_EXPANDED) -> str | None:
    """Why ``patch`` must not be applied (None when it is within ``cap``)."""
    try:
        size = expanded_size(patch, cap)
    except Unbounded as e:
        return f"diff refused: {e}"
    if size > cap:
        return f"diff expands to {size / 2**20:.1f} MiB, over the {cap / 2**20:.0f} MiB cap"
    return None

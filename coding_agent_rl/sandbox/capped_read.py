"""Bounded reads of files a sandbox's programs could have written (logs, reports, markers).

``read_file`` transfers a whole file: a 1 GiB sparse log costs the host gigabytes of memory. Here a
file is read through one exec that keeps at most ``cap`` bytes — the tail by default (where a
log's summary is) — base64-encoded so that binary content survives, together with its real size.
Only regular files are read (a directory, a FIFO or a device is reported, never opened), so the
read cannot block or fail on whatever a program left at that path. :data:`EMIT` is the bash
function behind it, for callers that fold the read into a larger script
(:func:`parse_emitted` reads its output back).
"""

from __future__ import annotations

import base64
import dataclasses
import shlex

from coding_agent_rl.sandbox.base import Sandbox

# car_emit NAME PATH CAP head|tail: "NAME SIZE" (-1 missing, -2 not a regular file), then the
# kept bytes base64-encoded on one line.
EMIT = r"""car_emit() {
  if [ -L "$2" ] || [ ! -e "$2" ]; then
    if [ -e "$2" ]; then echo "$1 -2"; else echo "$1 -1"; fi; echo; return 0
  fi
  if [ ! -f "$2" ]; then echo "$1 -2"; echo; return 0; fi
  echo "$1 $(stat -c %s -- "$2")"
  if [ "$4" = head ]; then head -c "$3" -- "$2"; else tail -c "$3" -- "$2"; fi | base64 -w0
  echo
}
"""
MARKER = "[... {n} bytes dropped by coding-agent-rl (read capped at {cap} bytes) ...]\n"


@dataclasses.dataclass(frozen=True)
class Capped:
    data: bytes  # at most the cap, a marker in front when bytes were dropped (tail mode)
    size: int  # the file's real size; -1 missing, -2 not a regular file
    cap: int

    @property
    def exists(self) -> bool:
        return self.size >= 0

    @property
    def truncated(self) -> bool:
        return self.size > self.cap

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def emit_command(name: str, path: str, cap: int, keep: str = "tail") -> str:
    """A call of :data:`EMIT` (the function must be defined earlier in the script)."""
    return f"car_emit {shlex.quote(name)} {shlex.quote(path)} {int(cap)} {keep}\n"


def parse_emitted(stdout: str, name: str, cap: int, keep: str = "tail") -> Capped:
    """The :class:`Capped` a ``car_emit NAME ...`` call printed (missing if it did not run)."""
    lines = stdout.split("\n")
    for i, line in enumerate(lines):
        head, _, size_s = line.partition(" ")
        if head != name or not size_s.lstrip("-").isdigit():
            continue
        size = int(size_s)
        try:
            data = base64.b64decode(lines[i + 1]) if i + 1 < len(lines) and size > 0 else b""
        except ValueError:  # the encoding cut short (the exec's output hit its cap)
            return Capped(b"", size, cap)
        if size > cap and keep == "tail":
            data = MARKER.format(n=size - cap, cap=cap).encode() + data
        return Capped(data, size, cap)
    return Capped(b"", -1, cap)


async def read_capped(
    sb: Sandbox, path: str, cap: int, *, keep: str = "tail", timeout: float = 60
) -> Capped:
    """Read at most ``cap`` bytes of ``path`` (as root); never more, whatever the file is. The
    cap is lowered to what one exec's captured output can carry base64-encoded."""
    cap = max(1, min(cap, sb.output_cap // 4 * 3 - 4096))
    script = EMIT + emit_command("CAR-READ", path, cap, keep)
    r = await sb.exec(script, timeout=timeout)
    return parse_emitted(r.stdout, "CAR-READ", cap, keep)

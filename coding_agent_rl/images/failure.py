"""The line of a failed build's output that says what went wrong, and the command that failed.

Preferred, in this order: the first Python exception line (``ModuleNotFoundError: No module
named 'numpy'``, even inside pip's "[N lines of output]" box), the first ``ERROR:`` line (pip's
own), a ``CMake Error`` / ``fatal:`` / ``error:`` line, else the last line of output. The failing
command is the last ``+ cmd`` line of a ``set -x`` trace before that line.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit)(?::\s.*)?$")
_ERROR = re.compile(r"^ERROR:\s")
_OTHER = re.compile(r"^(?:CMake Error|fatal:|error:|E:\s)", re.IGNORECASE)
_BOX = re.compile("^[\\s\u2502|\u2570\u2500>\u00d7]+")  # pip's frame around a subprocess's output


def clean(line: str) -> str:
    """``line`` without colour codes, pip's frame and surrounding blanks."""
    return _BOX.sub("", _ANSI.sub("", line)).strip()


def root_cause(lines: list[str]) -> str:
    """The most telling line of ``lines`` (a failed step's output); '' when there is none."""
    text = [clean(ln) for ln in lines if not ln.lstrip().startswith("+")]
    text = [ln for ln in text if ln]
    for pattern in (_EXCEPTION, _ERROR, _OTHER):
        for ln in text:
            if pattern.match(ln) and not ln.lower().startswith("error: subprocess-exited"):
                return ln
    return text[-1] if text else ""


def failing_command(lines: list[str], cause: str = "") -> str:
    """The last ``set -x`` trace line (``+ cmd``) before ``cause`` (or at all); '' if none."""
    last = ""
    for ln in lines:
        stripped = _ANSI.sub("", ln).strip()
        if cause and clean(ln) == cause:
            break
        if stripped.startswith("+"):
            last = stripped.lstrip("+ ")
    return last

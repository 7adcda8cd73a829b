"""Python children of the tests (the CLI in a subprocess) run with leaks made loud:
``ResourceWarning`` (ignored by Python's default filters) becomes an error, so an unclosed file,
socket or loop is reported on the child's stderr; :func:`check_stderr` fails on such reports.
``tests/conftest.py`` puts :data:`WARNINGS` in the environment every child inherits."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

WARNINGS = "error::ResourceWarning"
LEAK_REPORTS = ("Exception ignored in", "ResourceWarning", "unclosed", "Unclosed")
CLI = [sys.executable, "-m", "coding_agent_rl.cli"]


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with :data:`WARNINGS` added to ``PYTHONWARNINGS``."""
    out = dict(os.environ if env is None else env)
    present = [w for w in out.get("PYTHONWARNINGS", "").split(",") if w]
    out["PYTHONWARNINGS"] = ",".join([*present, WARNINGS] if WARNINGS not in present else present)
    return out


def check_stderr(stderr: str, what: str = "the child") -> None:
    """Fail when ``stderr`` reports an unraisable exception or an unclosed resource."""
    found = [line for line in stderr.splitlines() if any(r in line for r in LEAK_REPORTS)]
    assert not found, f"{what} leaked (stderr):\n" + "\n".join(found[:10])


def run_cli(
    *args: str, env: dict[str, str] | None = None, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``coding-agent-rl ARGS`` in a child with leaks made loud; its stderr checked."""
    kw.setdefault("timeout", 600)
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, env=child_env(env), **kw)
    check_stderr(r.stderr, f"coding-agent-rl {' '.join(args)}")
    return r

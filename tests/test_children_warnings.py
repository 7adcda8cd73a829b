"""CLI children run with ``ResourceWarning`` as an error and their stderr checked
(``tests/support/children.py``): a leak in a child is reported, not hidden by Python's default."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.children import WARNINGS, check_stderr, child_env, run_cli

LEAK = "import socket\ns = socket.socket()\ndel s\nprint('done')\n"  # an unclosed socket


def _child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LEAK], capture_output=True, text=True, env=env, timeout=60
    )


def test_a_leak_in_a_child_is_hidden_by_default_and_reported_with_ours() -> None:
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    hidden = _child(bare)
    assert hidden.returncode == 0 and hidden.stderr == "", hidden.stderr  # Python's default
    check_stderr(hidden.stderr)
    loud = _child(child_env(bare))
    assert "ResourceWarning" in loud.stderr, loud.stderr
    with pytest.raises(AssertionError, match="leaked"):
        check_stderr(loud.stderr)


def test_every_child_of_the_suite_inherits_the_setting() -> None:
    assert WARNINGS in os.environ.get("PYTHONWARNINGS", "").split(",")


def test_the_cli_itself_leaks_nothing() -> None:
    r = run_cli("--help")
    assert r.returncode == 0, r.stderr

"""``coding-agent-rl demo`` where no container engine answers: the real command in a subprocess
picks the local (bubblewrap) backend by itself, builds the example root filesystems (the
debootstrap base is built into the store once, ~2 min, then reused), and runs the real Claude
Code binary driven by the replay policy on one example task, graded in a network-less sandbox.
Docker is made unreachable (``DOCKER_HOST`` names a socket that does not exist)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from coding_agent_rl.commands.demo import pick_sandbox
from coding_agent_rl.errors import UserError
from coding_agent_rl.sandbox.local import bwrap_reason

pytestmark = pytest.mark.agents

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    if reason := bwrap_reason():
        pytest.skip(f"SKIPPED (no bubblewrap): {reason}")


def test_auto_falls_back_to_local_without_an_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in NO_DOCKER.items():
        monkeypatch.setenv(key, value)
    assert pick_sandbox("auto") == "local"
    assert pick_sandbox("local") == "local"
    with pytest.raises(UserError, match="--sandbox docker: no Docker engine answers"):
        pick_sandbox("docker")


def test_local_demo_solves_one_task_with_claude_code(tmp_path: pathlib.Path) -> None:
    out, scratch = tmp_path / "demo", tmp_path / "tmp"
    scratch.mkdir()  # TMPDIR: where the sandboxes keep their private copies
    args = ["demo", "--out", str(out), "--limit", "1", "--skip-adversaries"]
    proc = subprocess.run(
        [sys.executable, "-m", "coding_agent_rl.cli", *args, "--agent-budget", "120"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **NO_DOCKER, "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "local (bubblewrap) sandboxes" in proc.stdout
    assert "--sandbox local" in proc.stdout  # the hint names the backend that ran
    row = next(line for line in proc.stdout.splitlines() if line.startswith("replay "))
    assert row.split()[1:4] == ["1", "1", "1.00"], proc.stdout
    (record,) = [json.loads(x) for x in (out / "replay/results.jsonl").read_text().splitlines()]
    assert record["reward"] == 1.0 and record["failure_kind"] is None
    assert record["f2p_passed"] == record["f2p_total"] > 0
    assert record["apply_method"] == "git apply"
    assert record["turns"] >= 2  # Claude Code really called the policy through the adapter
    diff = (out / "replay" / record["artifacts"]["diff"]).read_text()
    assert diff.startswith("diff --git")
    assert (out / "replay/report.html").stat().st_size > 0
    assert list(scratch.glob("coding-agent-rl-local-*")) == [], "sandboxes left copies behind"

"""Under ``CI=true`` a skipped test fails (tests/conftest.py): nothing is left out of CI silently.
Outside CI a skip stays a loud skip. The scale run is deselected, not skipped, unless asked for."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROBE = "CODING_AGENT_RL_SKIP_PROBE"


def test_skip_probe() -> None:
    """Skips only when the test below asks it to."""
    if os.environ.get(PROBE) == "1":
        pytest.skip("probe: the environment asked for a skip")


def _pytest(*args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env[PROBE] = "1"
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_skip_fails_under_ci_and_stays_a_skip_outside() -> None:
    probe = f"{pathlib.Path(__file__).relative_to(ROOT)}::test_skip_probe"
    outside = _pytest(probe, ci=False)
    assert outside.returncode == 0 and "1 skipped" in outside.stdout, outside.stdout
    inside = _pytest(probe, ci=True)
    assert inside.returncode == 1, inside.stdout
    assert "a skipped test is a failure here" in inside.stdout
    assert "probe: the environment asked for a skip" in inside.stdout


def test_the_scale_run_is_deselected_not_skipped() -> None:
    r = _pytest("tests/rollout/test_scale.py", "--collect-only", ci=True)
    assert "deselected" in r.stdout and "skipped" not in r.stdout, r.stdout

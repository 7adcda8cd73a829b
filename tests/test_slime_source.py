"""slime's vendored source (``tests/support/slime_vendor.py``): found in one place, at the
recorded commit; when absent, its tests skip loudly (one summary line) and fail under CI."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from support import slime_vendor

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULE = "tests/rollout/test_slime_docs_flags.py"  # a slime test module, quick to collect


def _copy_at(tmp_path: pathlib.Path, commit: str) -> pathlib.Path:
    """A stand-in vendored tree: the real ``slime`` package (a link), VENDORED.md at ``commit``."""
    real = slime_vendor.slime_src()
    (tmp_path / "slime").symlink_to(real / "slime")
    (tmp_path / "VENDORED.md").write_text(f"Source: github.com/THUDM/slime at commit {commit}\n")
    return tmp_path


def test_the_copy_beside_the_checkout_is_the_recorded_commit(monkeypatch) -> None:
    monkeypatch.delenv("CODING_AGENT_RL_SLIME_SRC", raising=False)
    assert slime_vendor.slime_src() == slime_vendor.BESIDE
    assert slime_vendor.EXPECTED_COMMIT in (slime_vendor.BESIDE / "VENDORED.md").read_text()


def test_a_copy_at_another_commit_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CODING_AGENT_RL_SLIME_SRC", str(_copy_at(tmp_path, "0123abcd9")))
    with pytest.raises(RuntimeError, match="at 0123abcd9, the tests expect commit 624b824a8"):
        slime_vendor.slime_src()


def test_the_env_variable_wins(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CODING_AGENT_RL_SLIME_SRC", str(_copy_at(tmp_path, "624b824a8")))
    assert slime_vendor.slime_src() == tmp_path


def _pytest_without_slime(tmp_path: pathlib.Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["CODING_AGENT_RL_SLIME_SRC"] = str(tmp_path / "nothing-here")
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", MODULE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_absent_source_is_a_loud_skip_outside_ci(tmp_path) -> None:
    r = _pytest_without_slime(tmp_path, ci=False)
    assert r.returncode == 0 and "skipped" in r.stdout and "passed" not in r.stdout, r.stdout
    warning = [line for line in r.stdout.splitlines() if "slime tests were SKIPPED" in line]
    assert len(warning) == 1 and "CODING_AGENT_RL_SLIME_SRC" in warning[0], r.stdout


def test_absent_source_fails_under_ci(tmp_path) -> None:
    r = _pytest_without_slime(tmp_path, ci=True)
    assert r.returncode == 1, r.stdout
    assert "slime's vendored source not found" in r.stdout
    assert "skipped" not in r.stdout.strip().splitlines()[-1], r.stdout

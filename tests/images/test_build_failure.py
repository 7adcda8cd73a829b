"""The root-cause line of real pip failures (pip run here, offline: ``--no-index``)."""

from __future__ import annotations

import subprocess
import sys

from coding_agent_rl.images.failure import failing_command, root_cause


def pip_install(*args: str, cwd=None) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--dry-run", *args]
    script = f"set -x\n{' '.join(cmd)}\n"
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=cwd)
    assert r.returncode != 0
    return (r.stdout + r.stderr).splitlines()


def test_a_missing_package(tmp_path):
    lines = pip_install("--find-links", str(tmp_path), "car-absent-dependency")
    cause = root_cause(lines)
    assert cause == (
        "ERROR: Could not find a version that satisfies the requirement car-absent-dependency "
        "(from versions: none)"
    ), lines
    assert failing_command(lines, cause).endswith("--dry-run --find-links " + str(tmp_path) +
                                                  " car-absent-dependency")  # fmt: skip


def test_an_exception_inside_the_build_backend_beats_pips_summary(tmp_path):
    """pip's own summary says only that the build failed; the backend's exception says why."""
    (tmp_path / "setup.py").write_text(
        "import car_undeclared_helper\nfrom setuptools import setup\nsetup()\n"
    )
    lines = pip_install("--no-build-isolation", "-e", str(tmp_path))
    assert any(ln.lower().startswith("error:") for ln in lines), lines  # the line saying less
    assert root_cause(lines) == "ModuleNotFoundError: No module named 'car_undeclared_helper'"


def test_a_step_without_a_telling_line_gives_its_last_line():
    lines = ["+ make all", "compiling", "\x1b[91mmake: *** [all] Error 2\n\x1b[0m"]
    assert root_cause(lines) == "make: *** [all] Error 2"
    assert failing_command(lines) == "make all"
    assert root_cause([]) == "" and failing_command([]) == ""

"""Under ``CI=true`` a skipped test fails (tests/conftest.py): nothing is left out of CI silently.
Outside CI a skip stays a loud skip; a module skipped at collection (module-level
``pytest.skip``, ``importorskip``) is held to the same rule. The scale run is deselected, not skipped, unless asked for."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

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


# A generated test folder: module-level skip, importorskip, an in-test skip, a pass, an xfail.
PROBE_DIR = {
    "test_module_skip.py": """
        import pytest
        pytest.skip("probe: module skipped", allow_module_level=True)
        def test_never(): pass
    """,
    "test_importorskip.py": """
        import pytest
        pytest.importorskip("no_such_module_for_the_probe")
        def test_never(): pass
    """,
    "test_in_test.py": """
        import pytest
        def test_skips(): pytest.skip("probe: in-test skip")
        def test_passes(): pass
        @pytest.mark.xfail(reason="probe: expected", strict=True)
        def test_xfails(): assert False
    """,
}


def _counts(stdout: str) -> dict[str, int]:
    last = stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def _run_probe_dir(tmp_path: pathlib.Path, ci: bool) -> subprocess.CompletedProcess[str]:
    for name, body in PROBE_DIR.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "support.ci_skips",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",  # counts for all, not an interrupted session
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_collection_time_skips_fail_under_ci(tmp_path: pathlib.Path) -> None:
    """Our conftest's plugin, on a generated folder: under CI the module-level skip and the
    importorskip fail (collection errors) as the in-test skip does."""
    inside = _run_probe_dir(tmp_path, ci=True)
    assert inside.returncode == 1, inside.stdout
    assert _counts(inside.stdout) == {"failed": 1, "passed": 1, "xfailed": 1, "errors": 2}, (
        inside.stdout
    )
    assert "a module skipped at collection is a failure here" in inside.stdout
    assert "probe: module skipped" in inside.stdout
    assert "no_such_module_for_the_probe" in inside.stdout


def test_collection_time_skips_stay_skips_outside_ci(tmp_path: pathlib.Path) -> None:
    outside = _run_probe_dir(tmp_path, ci=False)
    assert outside.returncode == 0, outside.stdout
    assert _counts(outside.stdout) == {"passed": 1, "skipped": 3, "xfailed": 1}, outside.stdout

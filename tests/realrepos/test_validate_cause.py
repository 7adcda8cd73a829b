"""``validate`` names why a row did not validate: ``environment`` (the image: a conftest error,
a missing module or config option) vs ``row`` (its patch or tests), with the failing run's first
error line. The logs are real pytest output; the GradeResults around them are stand-ins for the
grading path (which the Docker tests run)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from coding_agent_rl.datasets.schema import TaskRow, parse_row
from coding_agent_rl.grading.result import GradeResult
from coding_agent_rl.grading.validate import classify, first_error


def pytest_log(tmp_path, files: dict[str, str]) -> tuple[int, str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    return r.returncode, r.stdout + r.stderr


def row() -> TaskRow:
    meta = {
        "instance_id": "x__y-1",
        "image": "i",
        "workdir": "/testbed",
        "fail_to_pass": ["test_a.py::test_new"],
        "pass_to_pass": ["test_a.py::test_old"],
    }
    return parse_row({"prompt": "p", "label": "", "metadata": meta}, base_dir=pathlib.Path("."))


def test_a_conftest_error_is_the_environment(tmp_path):
    conftest = "import types\nVALUE = types.SimpleNamespace().missing\n"
    code, log = pytest_log(
        tmp_path, {"conftest.py": conftest, "test_a.py": "def test_old(): pass\n"}
    )
    assert code == 4
    missing = {"test_a.py::test_new": "MISSING", "test_a.py::test_old": "MISSING"}
    gold = GradeResult(tests=missing, exit_code=code, test_log=log, reason="no result")
    cause, error = classify(row(), gold, gold)
    assert cause == "environment"
    assert "AttributeError" in error and "missing" in error
    assert first_error(log) == error


def test_a_gold_patch_that_fails_its_own_test_is_the_row(tmp_path):
    tests = "def test_old(): pass\ndef test_new(): assert 1 == 2, 'wrong fix'\n"
    code, log = pytest_log(tmp_path, {"test_a.py": tests})
    got = {"test_a.py::test_new": "FAILED", "test_a.py::test_old": "PASSED"}
    gold = GradeResult(tests=got, exit_code=code, test_log=log, reason="f2p fails")
    cause, error = classify(row(), gold, gold)
    assert (cause, error) == ("row", "AssertionError: wrong fix")

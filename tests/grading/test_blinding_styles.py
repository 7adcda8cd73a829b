"""Every test style pytest collects keeps its real outcomes through blinding: each suite below runs
under real pytest as written and blinded (ids mapped back); every original test has the same
outcome both ways, and every canary the outcome it was made for."""

from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys

import pytest

from coding_agent_rl.grading.canaries import plan_canaries

RECORDER = """
import json, os

OUT = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        prev = OUT.get(report.nodeid)
        if prev in (None, "passed") or report.outcome == "failed":
            OUT[report.nodeid] = "skipped" if hasattr(report, "wasxfail") else report.outcome


def pytest_collectreport(report):
    if report.failed:
        OUT[report.nodeid or "<collection>"] = "collection-error"


def pytest_sessionfinish(session):
    with open(os.environ["OUTCOMES"], "w") as f:
        json.dump(OUT, f)
"""

MODULE = "def f(x):\n    return x + 1\n"

UNITTEST_INHERITED = """
import os
import unittest
import unittest.mock

from mod import f


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k = 1

    def test_one(self):
        self.assertEqual(f(self.k), 2)

    def test_wrong(self):
        self.assertEqual(f(2), 4)


class TestPackrat(Base):
    pass


class TestLeftRecursion(TestPackrat):
    k = 3


class TestNew(unittest.TestCase):
    @unittest.mock.patch("os.getcwd", return_value="x")
    def test_mocked(self, m):
        self.assertEqual(os.getcwd(), "x")

    def test_f(self):
        self.assertEqual(f(5), 6)

    @unittest.skipIf(True, "never here")
    def test_skipped(self):
        self.assertEqual(f(1), 0)

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertEqual(f(i), i + 1)


del Base

if __name__ == "__main__":
    unittest.main()
"""

PARAMETRIZED = """
import pytest

from mod import f

CASES = ["a b", "it's", 'x"y', "[z]", "\\u00e9 \\u00fc", "a::b"]


@pytest.mark.parametrize("s", CASES)
def test_ids(s):
    assert isinstance(s, str)


@pytest.mark.parametrize("x, want", [(1, 2), (2, 3), (3, 5)])
def test_f(x, want):
    assert f(x) == want


class TestPlain:
    def test_method(self):
        assert f(0) == 1

    class TestNested:
        def test_inner(self):
            assert f(1) == 2


def test_last():
    assert f(9) == 10
"""


def _run(root: pathlib.Path, rel: str) -> dict[str, str]:
    out = root / "outcomes.json"
    (root / "car_recorder.py").write_text(RECORDER)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "car_recorder", "-p", "no:cacheprovider", rel],
        cwd=root,
        env={"PYTHONPATH": str(root), "OUTCOMES": str(out), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert out.is_file(), proc.stdout + proc.stderr
    return json.loads(out.read_text())


def _suite(tmp_path: pathlib.Path, rel: str, text: str, ini: str = "") -> pathlib.Path:
    root = tmp_path / "repo"
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / "mod.py").write_text(MODULE)
    (root / rel).write_text(text)
    if ini:
        (root / "pytest.ini").write_text(ini)
    return root


def _blinded_outcomes(root, rel, text, f2p, p2p, seed):
    plan = plan_canaries({rel: text}, f2p, p2p, random.Random(seed))
    (root / rel).write_text(plan.files.get(rel, text))
    got = _run(root, rel)
    (root / rel).write_text(text)
    mapped: dict[str, str] = {}
    for test_id, outcome in got.items():
        if not any(c.owns(test_id) for c in plan.canaries):
            mapped[plan.blinding.original(test_id)] = outcome
    return plan, got, mapped


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("rel", "text", "f2p"),
    [
        ("tests/test_u.py", UNITTEST_INHERITED, "tests/test_u.py::TestNew::test_f"),
        ("tests/pkg/test_p.py", PARAMETRIZED, "tests/pkg/test_p.py::test_last"),
    ],
    ids=["unittest", "pytest"],
)
def test_every_original_test_keeps_its_outcome_blinded(tmp_path, rel, text, f2p, seed):
    root = _suite(tmp_path, rel, text)
    if "pkg" in rel:
        (root / "tests" / "pkg" / "__init__.py").write_text("")
        (root / "tests" / "__init__.py").write_text("")
    truth = _run(root, rel)
    assert "collection-error" not in truth.values() and len(truth) >= 8, truth
    assert "failed" in truth.values() or "pkg" in rel  # a real failure is part of the suite
    p2p = tuple(t for t in truth if t != f2p)
    plan, blinded, mapped = _blinded_outcomes(root, rel, text, (f2p,), p2p, seed)
    assert plan.blinding.not_blinded == [], plan.blinding.not_blinded
    assert plan.blinding.names, "the file was blinded"
    assert not set(truth) & set(blinded) - {t for t in truth if "TestNested" in t}, (
        "no known id runs blinded (nested classes keep theirs)"
    )
    assert mapped == truth
    for canary in plan.canaries:
        outcomes = {o for t, o in blinded.items() if canary.owns(t)}
        assert outcomes == {"failed" if canary.expect == "fail" else "passed"}, canary


def test_a_test_pytest_collects_by_a_custom_pattern_is_graded_unblinded(tmp_path):
    text = "from mod import f\n\n\ndef check_f():\n    assert f(1) == 2\n\n\ndef test_g():\n    assert f(2) == 3\n"
    root = _suite(
        tmp_path, "tests/test_c.py", text, "[pytest]\npython_functions = check_* test_*\n"
    )
    truth = _run(root, "tests/test_c.py")
    assert truth == {"tests/test_c.py::check_f": "passed", "tests/test_c.py::test_g": "passed"}
    plan, _, mapped = _blinded_outcomes(
        root,
        "tests/test_c.py",
        text,
        ("tests/test_c.py::check_f",),
        ("tests/test_c.py::test_g",),
        1,
    )
    assert plan.blinding.not_blinded and "check_f" in plan.blinding.not_blinded[0]
    assert mapped == truth


CLASS_PARAMETRIZED = """
import pytest

from mod import f


@pytest.mark.parametrize("k", [1, 2])
class TestOptional:
    def test_f(self, k):
        assert f(k) == k + 1

    def test_g(self, k):
        assert f(k) > k


def test_plain():
    assert f(0) == 1
"""


@pytest.mark.parametrize("seed", range(6))
def test_canaries_beside_a_class_parametrized_as_a_whole(tmp_path, seed):
    rel = "tests/test_k.py"
    root = _suite(tmp_path, rel, CLASS_PARAMETRIZED)
    truth = _run(root, rel)
    assert len(truth) == 5 and set(truth.values()) == {"passed"}, truth
    f2p = ("tests/test_k.py::TestOptional::test_g[1]",)
    p2p = tuple(t for t in truth if t not in f2p)
    plan, blinded, mapped = _blinded_outcomes(root, rel, CLASS_PARAMETRIZED, f2p, p2p, seed)
    assert "collection-error" not in blinded.values(), blinded
    assert mapped == truth
    for canary in plan.canaries:
        outcomes = {o for t, o in blinded.items() if canary.owns(t)}
        assert outcomes == {"failed" if canary.expect == "fail" else "passed"}, canary

"""Canary generation and checking, with the blinded files run by a real pytest."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap

from coding_agent_rl.datasets.logparse import parse_pytest
from coding_agent_rl.grading.canaries import Canary, check_canaries, plan_canaries

SOURCE = textwrap.dedent("""
    import unittest

    import pytest


    def double(x):
        return 2 * x


    @pytest.mark.parametrize("x, expected", [(1, 2), (3, 6)])
    def test_double(x, expected):
        assert double(x) == expected


    def test_returns_early():
        if double(0) == 0:
            return
        assert False


    def test_calls_a_sibling():
        test_returns_early()
        assert double(2) == 4


    class TestMore(unittest.TestCase):
        def test_method(self):
            self.assertEqual(double(5), 10)

        def test_other(self):
            self.assertTrue(double(1))
            self.test_method()
""")
F2P = (
    "tests/test_x.py::test_double[1-2]",
    "tests/test_x.py::test_double[3-6]",
    "tests/test_x.py::TestMore::test_method",
    "tests/test_x.py::test_returns_early",
)
P2P = ("tests/test_x.py::TestMore::test_other", "tests/test_x.py::test_calls_a_sibling")
ORIGINAL_NAMES = {"test_double", "test_returns_early", "test_calls_a_sibling", "test_method"}


def _run(tmp_path, text: str) -> tuple[dict[str, str], str]:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_x.py").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_x.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    return parse_pytest(proc.stdout), proc.stdout


def test_blinded_file_runs_every_test_under_a_fresh_name_and_maps_back(tmp_path):
    plan = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P, random.Random(7))
    text = plan.files["tests/test_x.py"]
    # No task name is defined any more; tests that call each other still find each other.
    defined = set(re.findall(r"def (test\w*)", text))
    assert not defined & ORIGINAL_NAMES and all(
        re.fullmatch(r"test_[0-9a-f]{12}", n) for n in defined
    )
    fails = [c for c in plan.canaries if c.expect == "fail"]
    passes = [c for c in plan.canaries if c.expect == "pass"]
    # Two copies each of the two perturbable F2P functions; the early return has none.
    assert sorted(c.source for c in fails) == sorted(
        ["tests/test_x.py::test_double"] * 2 + ["tests/test_x.py::TestMore::test_method"] * 2
    )
    assert plan.blinding.unperturbed == [
        "tests/test_x.py::test_returns_early: return/yield/await in the body"
    ]
    assert all(
        c.node.startswith("tests/test_x.py::TestMore::") for c in fails if "TestMore" in c.source
    )
    assert len(passes) == 1
    statuses, out = _run(tmp_path, text)
    mapped = {plan.blinding.original(t): s for t, s in statuses.items()}
    assert check_canaries(plan.canaries, mapped) == [], out
    for c in plan.canaries:
        got = {s for t, s in mapped.items() if c.owns(t)}
        assert got == ({"FAILED"} if c.expect == "fail" else {"PASSED"}), (c, out)
    originals = {t: s for t, s in mapped.items() if not any(c.owns(t) for c in plan.canaries)}
    assert originals == {t: "PASSED" for t in (*F2P, *P2P)}, out


def test_copies_differ_from_the_original_only_in_a_same_type_value():
    plan = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P, random.Random(3))
    text = plan.files["tests/test_x.py"]
    bodies = re.findall(
        r"\n(    def test_\w+\(self\):\n        self.assertEqual\(double\(5\), (.+)\))", text
    )
    values = sorted(int(v) for _, v in bodies)
    assert len(values) == 3 and 10 in values and len(set(values)) == 3  # ints, never a tuple
    assert all(abs(v - 10) <= 10 for v in values)  # nearby numbers
    assert not re.search(r"assertEqual\(double\(5\), \(", text)  # never a wrapper
    cases = re.findall(
        r'parametrize\("x, expected", \[\((1), (-?\d+)\), \((3), (-?\d+)\)\]\)', text
    )
    assert len(cases) == 3 and {c[1] for c in cases} >= {"2"} and {c[3] for c in cases} >= {"6"}


def test_a_file_that_cannot_be_blinded_keeps_its_text_and_says_why():
    source = "def test_a():\n    assert 1 == 1\n\ntest_b = test_a\n"
    plan = plan_canaries({"t.py": source}, ("t.py::test_a",), (), random.Random(1))
    assert plan.blinding.not_blinded == ["t.py: line 4: test name 'test_a' used at import time"]
    assert plan.files["t.py"].startswith(source)
    assert [c.expect for c in plan.canaries] == ["fail", "fail", "pass"]
    compile(plan.files["t.py"], "t.py", "exec")


def test_synthetic_canaries_when_nothing_can_be_copied():
    source = "def test_only():\n    return\n"
    plan = plan_canaries({"t.py": source}, ("t.py::test_only",), (), random.Random(1))
    assert [c.expect for c in plan.canaries] == ["fail", "fail", "pass"]
    assert all(c.source is None for c in plan.canaries)
    assert "test_only" not in plan.files["t.py"]
    compile(plan.files["t.py"], "t.py", "exec")


def test_fresh_names_every_run():
    a = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P)
    b = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P)
    assert not set(a.blinding.names["tests/test_x.py"]) & set(b.blinding.names["tests/test_x.py"])


def test_evidence_rules():
    fail = Canary("t.py", "t.py::test_a_edge", "fail", "t.py::test_a")
    ok = Canary("t.py", "t.py::test_b_more", "pass")
    base = {"t.py::test_a": "FAILED", "t.py::test_b": "PASSED"}
    assert check_canaries([fail, ok], {**base, fail.node: "FAILED", ok.node: "PASSED"}) == []
    forged = check_canaries([fail, ok], {**base, fail.node: "PASSED", ok.node: "PASSED"})
    assert forged == [
        "canary t.py::test_a_edge (a copy of t.py::test_a) must fail but was recorded PASSED"
    ]
    hidden = check_canaries([fail, ok], {**base, ok.node: "PASSED"})
    assert hidden == ["canary t.py::test_a_edge was not run (its file's tests were)"]
    assert check_canaries([fail, ok], {**base, ok.node: "PASSED"}, whole_files=False) == []
    broken = check_canaries([fail, ok], {**base, fail.node: "FAILED", ok.node: "FAILED"})
    assert broken == ["canary t.py::test_b_more must pass but was recorded FAILED"]
    # A file that did not even import: honest breakage, no evidence.
    assert check_canaries([fail, ok], {}) == []
    errored = {"t.py::test_a": "ERROR", "t.py::test_b": "ERROR"}
    assert check_canaries([fail, ok], {**errored, fail.node: "ERROR", ok.node: "ERROR"}) == []

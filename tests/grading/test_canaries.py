"""Canary generation and checking, with the generated files run by a real pytest."""

from __future__ import annotations

import random
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


    class TestMore(unittest.TestCase):
        def test_method(self):
            self.assertEqual(double(5), 10)

        def test_other(self):
            self.assertTrue(double(1))
""")
F2P = (
    "tests/test_x.py::test_double[1-2]",
    "tests/test_x.py::test_double[3-6]",
    "tests/test_x.py::TestMore::test_method",
    "tests/test_x.py::test_returns_early",
)
P2P = ("tests/test_x.py::TestMore::test_other",)


def test_derived_canaries_sit_next_to_their_source_and_fail_whatever_the_code_does(tmp_path):
    plan = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P, random.Random(7))
    fails = [c for c in plan.canaries if c.expect == "fail"]
    passes = [c for c in plan.canaries if c.expect == "pass"]
    assert len(fails) == 2 and len(passes) == 1
    # Copies of the copyable F2P tests (not the one with an early return), named after them.
    assert {c.source.split("::", 1)[1] for c in fails} <= {"test_double[1-2]", "test_double[3-6]",
                                                          "TestMore::test_method"}  # fmt: skip
    assert {c.node.rsplit("::", 1)[0] for c in fails if "TestMore" in c.source} <= {
        "tests/test_x.py::TestMore"
    }
    # The pass-to-pass test it imitates is a method: so is the must-pass canary.
    assert passes[0].node.startswith("tests/test_x.py::TestMore::test_other_")
    for c in fails:
        assert c.node.rsplit("::", 1)[1].startswith(c.source.rsplit("::", 1)[1].split("[")[0] + "_")
    text = plan.files["tests/test_x.py"]
    assert text.startswith(SOURCE)  # appended: no original line moved
    # Run the file as it will be graded: canaries fail, everything else is untouched.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_x.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    statuses = parse_pytest(proc.stdout)
    assert check_canaries(plan.canaries, statuses) == [], proc.stdout
    for c in plan.canaries:
        got = {s for t, s in statuses.items() if c.owns(t)}
        assert got == ({"FAILED"} if c.expect == "fail" else {"PASSED"}), (c, proc.stdout)
    originals = {t: s for t, s in statuses.items() if not any(c.owns(t) for c in plan.canaries)}
    assert originals == {
        "tests/test_x.py::test_double[1-2]": "PASSED",
        "tests/test_x.py::test_double[3-6]": "PASSED",
        "tests/test_x.py::test_returns_early": "PASSED",
        "tests/test_x.py::TestMore::test_method": "PASSED",
        "tests/test_x.py::TestMore::test_other": "PASSED",
    }


def test_synthetic_canaries_when_nothing_can_be_copied():
    source = "def test_only():\n    return\n"
    plan = plan_canaries({"t.py": source}, ("t.py::test_only",), (), random.Random(1))
    assert [c.expect for c in plan.canaries] == ["fail", "fail", "pass"]
    assert all(c.source is None for c in plan.canaries)
    assert plan.canaries[0].node.startswith("t.py::test_only_")
    compile(plan.files["t.py"], "t.py", "exec")


def test_fresh_names_every_run():
    a = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P)
    b = plan_canaries({"tests/test_x.py": SOURCE}, F2P, P2P)
    assert len({c.node for c in a.canaries} | {c.node for c in b.canaries}) > 3


def test_evidence_rules():
    fail = Canary("t.py", "t.py::test_a_edge", "fail", "t.py::test_a")
    ok = Canary("t.py", "t.py::test_b_more", "pass")
    base = {"t.py::test_a": "FAILED", "t.py::test_b": "PASSED"}
    assert check_canaries([fail, ok], {**base, fail.node: "FAILED", ok.node: "PASSED"}) == []
    forged = check_canaries([fail, ok], {**base, fail.node: "PASSED", ok.node: "PASSED"})
    assert forged == ["canary t.py::test_a_edge must fail but was recorded PASSED"]
    hidden = check_canaries([fail, ok], {**base, ok.node: "PASSED"})
    assert hidden == ["canary t.py::test_a_edge was not run (its file's tests were)"]
    assert check_canaries([fail, ok], {**base, ok.node: "PASSED"}, whole_files=False) == []
    broken = check_canaries([fail, ok], {**base, fail.node: "FAILED", ok.node: "FAILED"})
    assert broken == ["canary t.py::test_b_more must pass but was recorded FAILED"]
    # A file that did not even import: honest breakage, no evidence.
    assert check_canaries([fail, ok], {}) == []
    errored = {"t.py::test_a": "ERROR", "t.py::test_b": "ERROR"}
    assert check_canaries([fail, ok], {**errored, fail.node: "ERROR", ok.node: "ERROR"}) == []

"""Fresh-input canaries: derived against gold code by a real pytest, then graded with the
blinded file by a real pytest; a forger keyed on the test's own inputs loses."""

from __future__ import annotations

import ast
import os
import random
import re
import subprocess
import sys
import textwrap

from coding_agent_rl.datasets.logparse import parse_pytest
from coding_agent_rl.grading import gold_canaries as gc
from coding_agent_rl.grading.canaries import check_canaries, plan_canaries
from coding_agent_rl.grading.gold_store import GoldStore

GOLD = textwrap.dedent("""
    import re


    def slugify(text, sep="-"):
        return re.sub(r"[^a-z0-9]+", sep, text.lower()).strip(sep)
""")
BUGGY = GOLD.replace("]+", "]")
# The forger: the hidden test's known input -> output pairs, the buggy code otherwise.
FORGED = BUGGY.replace(
    'def slugify(text, sep="-"):\n',
    textwrap.dedent("""
    KNOWN = {("Hello, World!", "-"): "hello-world", ("Rock  &  Roll", "_"): "rock_roll",
             ("A  b", "-"): "a-b", ("X--y", "_"): "x_y", ("p..q", "-"): "p-q"}


    def slugify(text, sep="-"):
        if (text, sep) in KNOWN:
            return KNOWN[(text, sep)]
""").lstrip("\n"),
    1,
)
TESTS = textwrap.dedent("""
    import unittest

    import pytest

    from slug import slugify


    @pytest.mark.parametrize(
        "text, sep, expected",
        [("Hello, World!", "-", "hello-world"), ("Rock  &  Roll", "_", "rock_roll")],
    )
    def test_runs(text, sep, expected):
        assert slugify(text, sep=sep) == expected


    def test_plain():
        assert slugify("A  b") == "a-b"


    class TestM(unittest.TestCase):
        def test_m(self):
            self.assertEqual(slugify("X--y", "_"), "x_y")

        def test_helper(self):
            self.assertEqual(slugify("p..q"), "p-q")
""")
PATH = "tests/test_s.py"
F2P = (
    f"{PATH}::test_runs[Hello, World!---hello-world]",
    f"{PATH}::test_runs[Rock  &  Roll-_-rock_roll]",
    f"{PATH}::test_plain",
    f"{PATH}::TestM::test_m",
    f"{PATH}::TestM::test_helper",
)


def _pytest(root, text, code, *args, env=None):
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_s.py").write_text(text)
    (root / "slug.py").write_text(code)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", PATH, *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root), **(env or {})},
    )
    return parse_pytest(proc.stdout), proc.stdout


def _derive(root, rng):
    variants, skipped = gc.probes(TESTS, PATH, F2P, rng)
    text, names = gc.probe_file(TESTS, variants)
    outs = []
    for i in range(2):  # twice: values the runs disagree on are dropped
        out = root / f"probe{i}.jsonl"
        _pytest(root, text, GOLD, "-k", " or ".join(names), env={gc.PROBE_ENV: str(out)})
        outs.append(out.read_text())
    return gc.derive(variants, gc.parse_records(outs)), skipped


def test_every_shape_gets_variants_with_changed_inputs_and_gold_values(tmp_path):
    derived, skipped = _derive(tmp_path, random.Random(4))
    assert skipped == []
    assert sorted({v.source for v in derived}) == sorted({t.split("[")[0] for t in F2P})
    for v in derived:
        # Same shape: only literal values differ from the original test.
        fn = gc._find(ast.parse(TESTS), list(v.scope))
        assert fn is not None
        first = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
        original = "".join(TESTS.splitlines(keepends=True)[first - 1 : fn.end_lineno])
        filled = gc.render_pass(v, v.scope[-1])
        assert filled != original and _shape(filled) == _shape(original), filled
        for value in v.values:  # what the gold code returns for the changed input
            assert isinstance(value, str)


def _shape(text):
    tree = ast.parse(textwrap.dedent(text))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            node.value = type(node.value).__name__
    return ast.dump(tree)


def test_nondeterministic_or_unliteral_values_are_dropped():
    recs = gc.parse_records(
        [
            '["a#0", "1"]\n["b#0", "2"]\n["c#0", "<object at 0x1>"]\n["d#0", "1"]\n["d#0", "2"]\n',
            '["a#0", "1"]\n["b#0", "3"]\n["c#0", "<object at 0x1>"]\nnot json\n',
        ]
    )
    assert recs == {"a#0": 1}


def _blinded(fresh, seed):
    return plan_canaries({PATH: TESTS}, F2P, (), random.Random(seed), fresh=fresh)


def _grade(root, plan, code):
    statuses, out = _pytest(root, plan.files[PATH], code)
    mapped = {plan.blinding.original(t): s for t, s in statuses.items()}
    f2p_ok = all(
        mapped.get(t) == "PASSED" for t in F2P if not any(c.owns(t) for c in plan.canaries)
    )
    return f2p_ok, check_canaries(plan.canaries, mapped), out


def test_lookup_table_forger_wins_without_fresh_canaries_and_loses_with_them(tmp_path):
    derived, _ = _derive(tmp_path, random.Random(5))
    store = GoldStore(tmp_path / "store.json")
    store.put("slug-1", "GOLD PATCH", {PATH: TESTS}, derived)
    fresh = GoldStore(tmp_path / "store.json").get("slug-1", "GOLD PATCH", {PATH: TESTS})
    assert fresh is not None and len(fresh) == len(derived)
    assert GoldStore(tmp_path / "store.json").get("slug-1", "OTHER", {PATH: TESTS}) is None

    # Defence off (today's copies): the forger passes every test and every canary.
    off = _blinded(None, 1)
    assert off.blinding.kind == "copies"
    ok, evidence, out = _grade(tmp_path, off, FORGED)
    assert ok and evidence == [], out
    # Defence on: a fresh must-pass canary fails under the forger...
    on = _blinded(fresh, 1)
    assert on.blinding.kind == "gold-fresh"
    assert sum(c.expect == "pass" and c.source is not None for c in on.canaries) == len(fresh)
    ok, evidence, out = _grade(tmp_path, on, FORGED)
    assert any("must pass but was recorded FAILED" in e for e in evidence), (evidence, out)
    # ... while the gold code passes everything and every canary behaves,
    ok, evidence, out = _grade(tmp_path, on, GOLD)
    assert ok and evidence == [], out
    # and a plain wrong fix still fails the task's own tests.
    ok, _, out = _grade(tmp_path, on, BUGGY)
    assert not ok, out
    # The fresh canaries are blinded like the rest: no task name is defined.
    text = on.files[PATH]
    assert not {"test_runs", "test_plain", "test_m", "test_helper"} & set(
        re.findall(r"def (test\w*)", text)
    )


def test_tests_without_a_changeable_input_say_why_and_a_literal_on_the_left_is_handled():
    text = textwrap.dedent("""
        def test_no_args():
            assert compute() == 3


        def test_calls_a_test():
            test_no_args()
            assert f("ab") == "AB"


        def test_left():
            assert "AB" == f("ab")


        def test_flag():
            assert f(True) == 1
    """)
    ids = tuple(
        f"t.py::{n}" for n in ("test_no_args", "test_calls_a_test", "test_left", "test_flag")
    )
    variants, skipped = gc.probes(text, "t.py", ids, random.Random(2), per_test=1)
    assert skipped == [
        "t.py::test_no_args: no literal argument to change in the compared call",
        "t.py::test_calls_a_test: names another test",
        "t.py::test_flag: no literal argument to change in the compared call",
    ]
    (v,) = variants
    assert re.fullmatch(
        r"\ndef test_left\(\):\n    assert __CAR_EXPECTED_0__ == f\(\'[a-z]b\'\)\n|"
        r"\ndef test_left\(\):\n    assert __CAR_EXPECTED_0__ == f\(\'a[a-z]\'\)\n",
        "\n" + v.text,
    )
    assert "f('ab')" not in v.probe and 'f("ab")' not in v.probe

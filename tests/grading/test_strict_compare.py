"""The grader's equality, run by real pytest on a real git diff (no Docker).

A stand-in repository (``strict_compare_cases/``): ``shapes.py`` at its base, and an agent diff
that fixes one method of it and adds ``agent.py`` (forgers of ``==`` and honest types). The
hidden test file is run as shipped and as the grader stages it (:func:`compare_rewrite.rewrite`,
the helper under a random name in a separate directory, reading the applied diff): every forger
passes as shipped and fails staged; every honest comparison passes both ways, once the gold patch
(the shapes fix and ``Caseless``, whose ``__eq__`` is the task's fix) names the dunders it writes.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from coding_agent_rl.grading import compare_rewrite
from coding_agent_rl.grading.gold_equality import gold_dunders, own_pairs

CASES = pathlib.Path(__file__).with_name("strict_compare_cases")
# Without the gold's dunders: a builtin subclass whose own == the diff wrote compares as its base.
FALSE_NEGATIVES = {"test_honest_caseless"}


def _git(cwd: pathlib.Path, *args: str) -> str:
    run = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(run, cwd=cwd, check=True, capture_output=True, text=True).stdout


def _outcomes(repo: pathlib.Path, env: dict[str, str]) -> dict[str, str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "hidden_test.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"(PASSED|FAILED|ERROR|SKIPPED) hidden_test\.py::(?:\w+::)?(\w+)", line)
        if m:
            out[m.group(2)] = m.group(1)
    assert out, r.stdout[-3000:]
    return out


def _gold_diff(tmp: pathlib.Path) -> str:
    """The task's gold patch: the shapes fix and the honest ``Caseless`` alone."""
    source = (CASES / "agent.py").read_text()
    caseless = next(
        n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Caseless"
    )
    shutil.copy(CASES / "shapes_base.py", tmp / "shapes.py")
    _git(tmp, "init", "-q")
    _git(tmp, "add", "-A")
    _git(tmp, "commit", "-qm", "base")
    shutil.copy(CASES / "shapes_fixed.py", tmp / "shapes.py")
    (tmp / "agent.py").write_text(ast.get_source_segment(source, caseless) + "\n")
    _git(tmp, "add", "-A")
    return _git(tmp, "diff", "--cached")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict[str, str], dict[str, str], str, dict[str, str]]:
    repo = tmp_path_factory.mktemp("repo")
    shutil.copy(CASES / "shapes_base.py", repo / "shapes.py")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    shutil.copy(CASES / "shapes_fixed.py", repo / "shapes.py")
    shutil.copy(CASES / "agent.py", repo / "agent.py")
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached")
    (repo / "agent.diff").write_text(diff)
    text = (CASES / "hidden_test.py").read_text()
    (repo / "hidden_test.py").write_text(text)
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    shipped = _outcomes(repo, env)

    alias = compare_rewrite.new_alias()
    got = compare_rewrite.rewrite(text, alias)
    assert got.error is None and got.operands > 40, got
    plugin = tmp_path_factory.mktemp("plugin")
    helper = compare_rewrite.helper_source(str(repo), str(repo / "agent.diff"), ["hidden_test.py"])
    (plugin / f"{alias}.py").write_text(helper)
    (repo / "hidden_test.py").write_text(got.text)
    staged = _outcomes(repo, {**env, "PYTHONPATH": f"{plugin}:{repo}"})

    own = gold_dunders(
        _gold_diff(tmp_path_factory.mktemp("gold")),
        {"shapes.py": (CASES / "shapes_base.py").read_text()},
    )
    assert own == {"agent.py": ["Caseless.__eq__"]}
    helper = compare_rewrite.helper_source(
        str(repo), str(repo / "agent.diff"), ["hidden_test.py"], own=own_pairs(own)
    )
    (plugin / f"{alias}.py").write_text(helper)
    with_gold = _outcomes(repo, {**env, "PYTHONPATH": f"{plugin}:{repo}"})
    return shipped, staged, got.text, with_gold


def test_every_forger_wins_as_shipped_and_loses_staged(runs):
    shipped, staged, _, with_gold = runs
    forged = sorted(n for n in shipped if "forged" in n)
    assert len(forged) >= 27
    assert {n: shipped[n] for n in forged} == dict.fromkeys(forged, "PASSED")
    assert {n: staged[n] for n in forged} == dict.fromkeys(forged, "FAILED")
    assert {n: with_gold[n] for n in forged} == dict.fromkeys(forged, "FAILED")


def test_honest_comparisons_pass_staged(runs):
    shipped, staged, _, with_gold = runs
    honest = sorted(n for n in shipped if "honest" in n)
    assert len(honest) >= 6
    assert {n: shipped[n] for n in honest} == dict.fromkeys(honest, "PASSED")
    expected = {n: "FAILED" if n in FALSE_NEGATIVES else "PASSED" for n in honest}
    assert {n: staged[n] for n in honest} == expected
    assert {n: with_gold[n] for n in honest} == dict.fromkeys(honest, "PASSED")


def test_the_rewrite_keeps_every_line_where_it_was(runs):
    _, _, text, _ = runs
    shipped = (CASES / "hidden_test.py").read_text().splitlines()
    staged = text.splitlines()
    assert len(staged) == len(shipped) + 1 and staged[-1].startswith("import car_cmp_")
    for a, b in zip(shipped, staged, strict=False):
        assert re.sub(r"car_cmp_\w+\.v\(|, '\w+'\)|\)", "", b) == a.replace(")", "")


def test_rewrite_targets():
    text = (
        "x = [a == b for a, b in pairs]\n"  # module level: runs at import, left alone
        "def test_t(self):\n"
        "    assert f(x) == 3 and not g() != [y]\n"
        "    assert a is b\n"
        "    assert k in d, 'message'\n"
        "    assert (h(x) == 1).all()\n"  # numpy style: the comparison's value is used
        "    assert (a == b) == c and all(f(i) == i for i in r)\n"  # nested
        "    self.assertEqual(p(), q)\n"
        "    self.assertTrue(u == 'ü' == w)\n"
    )
    got = compare_rewrite.rewrite(text, "H")
    lines = got.text.splitlines()
    assert lines[0] == "x = [a == b for a, b in pairs]"
    assert lines[2] == "    assert H.v(f(x)) == 3 and not H.v(g()) != H.v([y])"
    assert lines[3] == "    assert a is b"
    assert lines[4] == "    assert H.v(k) in H.v(d, 'i'), 'message'"
    assert lines[5] == "    assert (H.v(h(x)) == 1).all()"
    assert (
        lines[6]
        == "    assert (H.v(H.v(a) == H.v(b))) == H.v(c) and all(H.v(f(i)) == H.v(i) for i in r)"
    )
    assert lines[7] == "    self.assertEqual(H.v(p()), H.v(q))"
    assert lines[8] == "    self.assertTrue(H.v(u) == 'ü' == H.v(w))"
    assert lines[-1].startswith("import H")


def test_the_helper_is_python_3_6_syntax_and_stdlib_only():
    source = compare_rewrite.SOURCE.read_text()
    tree = ast.parse(source, feature_version=(3, 6))
    imported = {
        a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])
    }
    assert imported <= set(sys.stdlib_module_names), imported


def test_a_file_that_does_not_parse_is_left_as_it_is():
    got = compare_rewrite.rewrite("def test(:\n", "H")
    assert (got.text, got.operands) == ("def test(:\n", 0) and "SyntaxError" in (got.error or "")

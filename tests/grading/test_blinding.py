"""Blinding and same-type canaries, statistically: over many independent blindings of the bundled
tasks' hidden tests, no simple statistic of a set of near-identical tests (its blinded names, its
positions in the file, the centrality of its expected values) picks the original above chance,
and every copy's value has the original's type and shape."""

from __future__ import annotations

import ast
import math
import random
import subprocess

import pytest

from coding_agent_rl.datasets import examples_dataset
from coding_agent_rl.datasets.schema import load_dataset
from coding_agent_rl.grading.canaries import COPIES, plan_canaries
from coding_agent_rl.grading.perturb import value_line

EXAMPLES = examples_dataset().parent
SEEDS = 200


@pytest.fixture(scope="module")
def hidden_sources(tmp_path_factory):
    """Per bundled task: (row, {test file: text with the hidden tests in})."""
    out = []
    for row in load_dataset(examples_dataset()):
        task = row.instance_id.split("__", 1)[1]
        repo = tmp_path_factory.mktemp(task)
        subprocess.run(["cp", "-r", f"{EXAMPLES / task / 'repo'}/.", str(repo)], check=True)
        patch = (EXAMPLES / task / "tests.patch").read_text()
        subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=repo, check=True)
        files = {f: (repo / f).read_text() for f in row.test_files if (repo / f).exists()}
        out.append((row, files))
    return out


def _defs(text: str) -> dict[str, tuple[int, ast.AST]]:
    """Blinded test name -> (position in the file, definition)."""
    found = [
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")
    ]
    found.sort(key=lambda n: n.lineno)
    return {n.name: (i, n) for i, n in enumerate(found)}


def _constants(node: ast.AST) -> list[object]:
    """The literal values in a definition, in source order (``-5`` is one value)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return [ast.literal_eval(node)]
    if isinstance(node, ast.Constant):
        return [node.value]
    return [v for child in ast.iter_child_nodes(node) for v in _constants(child)]


def _distance(a: object, b: object) -> float:
    if isinstance(a, str) and isinstance(b, str):
        return sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b)
    return 0.0 if a == b else 1.0


def _centre(values: list[object]) -> int:
    totals = [sum(_distance(v, w) for w in values) for v in values]
    return min(range(len(values)), key=lambda i: (totals[i], random.random()))


def _order(value: object) -> object:
    """A total order on values of one type (containers by their items, dicts by their values)."""
    if isinstance(value, dict):
        return [_order(v) for v in value.values()]
    if isinstance(value, (list, tuple)):
        return [(type(v).__name__, _order(v)) for v in value]
    return value


GROUP_STATISTICS = {  # over (blinded names, positions in the file) of a set
    "smallest name": lambda names, pos: min(range(len(names)), key=names.__getitem__),
    "first defined": lambda names, pos: min(range(len(pos)), key=pos.__getitem__),
    "last defined": lambda names, pos: max(range(len(pos)), key=pos.__getitem__),
}
VALUE_STATISTICS = {  # over the expected values of one case
    "centre value": _centre,
    "smallest value": lambda vals: min(range(len(vals)), key=lambda i: _order(vals[i])),
    "largest value": lambda vals: max(range(len(vals)), key=lambda i: _order(vals[i])),
}


def test_no_statistic_of_a_set_of_near_identical_tests_singles_out_the_original(hidden_sources):
    hits = {name: 0 for name in (*GROUP_STATISTICS, *VALUE_STATISTICS)}
    trials = groups_seen = 0
    for seed in range(SEEDS):
        for t, (row, files) in enumerate(hidden_sources):
            rng = random.Random(f"{seed}-{t}")
            plan = plan_canaries(files, row.fail_to_pass, row.pass_to_pass, rng)
            groups: dict[str, list[str]] = {}
            for c in plan.canaries:
                if c.source and not c.opposite:  # opposite copies: test_opposite_canaries.py
                    groups.setdefault(c.source, []).append(c.node.rsplit("::", 1)[1])
            for source, copies in groups.items():
                path = source.split("::", 1)[0]
                blind = {v: k for k, v in plan.blinding.names[path].items()}
                defs = _defs(plan.files[path])
                members = [blind[source.rsplit("::", 1)[1]], *copies]
                assert len(members) == COPIES + 1
                consts = [_constants(defs[m][1]) for m in members]
                assert len({len(c) for c in consts}) == 1  # the same shape of source
                # Where the members differ: one position per parametrised case (or one).
                cases = [i for i in range(len(consts[0])) if len({repr(c[i]) for c in consts}) > 1]
                assert cases, source
                names, pos = members, [defs[m][0] for m in members]
                groups_seen += 1
                for stat, pick in GROUP_STATISTICS.items():
                    hits[stat] += pick(names, pos) == 0
                for i in cases:
                    values = [c[i] for c in consts]
                    assert len({type(v) for v in values}) == 1  # same type, never a wrapper
                    trials += 1
                    for stat, pick in VALUE_STATISTICS.items():
                        hits[stat] += pick(values) == 0
    assert groups_seen >= 1000 and trials >= 2000
    chance = 1 / (COPIES + 1)
    for stat, h in hits.items():
        n = groups_seen if stat in GROUP_STATISTICS else trials
        bound = chance + 4 * math.sqrt(chance * (1 - chance) / n)  # ~4 sigma above chance
        assert h / n <= bound, (stat, h / n, bound)


@pytest.mark.parametrize(
    "value",
    ["hello-world", "a-b", "#fff", 101, -13, 0, 2.5, [0, 1, 2], {"k": "abc#123"}, (1, "a", True)],
)
def test_value_lines_put_the_original_anywhere_and_keep_type_and_shape(value):
    rng = random.Random(5)
    at = [0] * (COPIES + 1)
    centre_is_original = smallest_is_original = 0
    for _ in range(600):
        line = value_line(value, COPIES, rng)
        assert line is not None
        values, j = line
        assert values[j] == value and len({repr(v) for v in values}) == COPIES + 1
        for v in values:
            assert type(v) is type(value)
            if isinstance(value, (str, list, tuple, dict)):
                assert len(v) == len(value)
        at[j] += 1
        centre_is_original += _centre(values) == j
        smallest_is_original += min(range(len(values)), key=lambda i: _order(values[i])) == j
    assert min(at) > 150  # uniform over the k + 1 places
    assert centre_is_original / 600 < 1 / 3 + 0.08
    assert smallest_is_original / 600 < 1 / 3 + 0.08


def test_no_same_type_line_for_a_lone_bool_or_an_empty_value():
    rng = random.Random(1)
    assert value_line(True, COPIES, rng) is None
    assert value_line("", COPIES, rng) is None
    assert value_line("  ", COPIES, rng) is None
    assert value_line(None, COPIES, rng) is None
    assert value_line([], COPIES, rng) is None


INHERITED = """
import unittest


class Base(unittest.TestCase):
    value = 1

    def helper(self):
        return self.value

    def test_shared(self):
        self.assertEqual(self.helper() * 2, 2 * self.value)


class TestChild(Base):
    value = 3

    def test_own(self):
        assert self.helper() == 3
        self.test_shared()


async def test_async_is_kept():
    assert 1 == 1


def test_uses_a_line_separator():
    assert "a\u2028b" == "a\\u2028b"
"""


def test_inheritance_and_cross_references_survive_blinding_under_real_pytest(tmp_path):
    ids = ("t/test_i.py::TestChild::test_own", "t/test_i.py::TestChild::test_shared")
    plan = plan_canaries({"t/test_i.py": INHERITED}, ids[:1], ids[1:], random.Random(2))
    assert plan.blinding.not_blinded == []
    text = plan.files["t/test_i.py"]
    assert "test_own" not in text and "test_shared" not in text
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_i.py").write_text(text)
    proc = subprocess.run(
        ["python3", "-m", "pytest", "-rA", "-p", "no:cacheprovider", "t/test_i.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    from coding_agent_rl.datasets.logparse import parse_pytest

    statuses = {plan.blinding.original(t): s for t, s in parse_pytest(proc.stdout).items()}
    assert statuses["t/test_i.py::TestChild::test_own"] == "PASSED", proc.stdout
    assert statuses["t/test_i.py::TestChild::test_shared"] == "PASSED", proc.stdout
    assert statuses["t/test_i.py::Base::test_shared"] == "PASSED", proc.stdout
    copies = [c for c in plan.canaries if c.source]
    assert len(copies) == COPIES and all("::TestChild::" in c.node for c in copies)
    for c in copies:
        assert {s for t, s in statuses.items() if c.owns(t)} == {"FAILED"}, proc.stdout


AWKWARD = [
    "def test_a(): assert 1 == 1\ndef test_b(): pass\n",  # definitions sharing lines: fine
    "class TestA: pass\n",
    "class TestA:\n    def test_x(self): assert 1 == 2; assert 2 == 2\n",
    "def test_a():\r\n    assert 'x' == 'x'\r\n",
    "def test_a():\r    assert 1 == 1\r",
    "x = 1\ndef test_a(test_b):\n    pass\ndef test_b():\n    pass\n",
    "import pytest\n@pytest.fixture\ndef test_data():\n    return 1\ndef test_a(test_data):\n    assert test_data == 1\n",
    "def test_a():\n    assert f'{1}' == '1'\n",
    "def test_\udcff():\n    pass\n",
    "def test_a(:\n",
    "",
    "def test_a():\n    assert [1, [2, {'k': (3, 'a\u2028b')}]] == [1, [2, {'k': (3, 'a\u2028b')}]]\n",
]


@pytest.mark.parametrize("source", AWKWARD)
def test_awkward_files_are_blinded_or_left_alone_never_a_crash(source):
    ids = ("t.py::test_a", "t.py::TestA::test_x")
    plan = plan_canaries({"t.py": source}, ids, (), random.Random(4))
    for text in plan.files.values():
        compile(text, "t.py", "exec")
    if "t.py" in plan.blinding.names:
        assert not {"test_a", "test_x"} & set(_defs(plan.files["t.py"]))

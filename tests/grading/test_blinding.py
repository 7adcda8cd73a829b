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
                if c.source:
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

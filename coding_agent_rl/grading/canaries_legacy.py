"""The canaries before blinding, kept as the "defence off" setting (``Defences(blinding=False)``).

Copies of fail-to-pass tests named ``<test>_<word>``, appended at the end of the file, whose last
assertion compares against ``(expected, <int>)``; a synthetic must-pass test. Tests use it to show
what blinding and same-type canaries stop: a forger spots these by name and position, and a value
whose ``__eq__`` is True for anything but a tuple passes the hidden tests while they fail.
"""

from __future__ import annotations

import ast
import copy
import random
from typing import Any

from coding_agent_rl.grading.canaries import Canary, CanaryPlan

WORDS = (
    "again", "basic", "boundary", "combined", "default", "edge", "empty", "extra", "large",
    "mixed", "more", "nested", "other", "repeated", "reversed", "simple", "single", "small",
    "twice", "unicode", "variant", "whitespace",
)  # fmt: skip
MUST_FAIL = 2
SOURCE_CAP = 2 * 1024 * 1024  # test files larger than this are not parsed for derivation


def _split(test_id: str) -> tuple[str, list[str]]:
    path, _, rest = test_id.partition("::")
    return path, [p.split("[", 1)[0] for p in rest.split("::")] if rest else []


def _find(tree: ast.Module, names: list[str]) -> tuple[ast.AST, ast.FunctionDef] | None:
    scope: Any = tree
    for name in names[:-1]:
        scope = next(
            (n for n in scope.body if isinstance(n, ast.ClassDef) and n.name == name), None
        )
        if scope is None:
            return None
    func = next(
        (n for n in scope.body if isinstance(n, ast.FunctionDef) and n.name == names[-1]), None
    )
    return (scope, func) if func is not None else None


def _copyable(func: ast.FunctionDef) -> bool:
    """No ``return``/``yield`` outside nested scopes: an appended assertion always runs."""
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return True


def _perturb(func: ast.FunctionDef, rng: random.Random) -> None:
    """Make the copy fail deterministically (see the module docstring)."""
    k = ast.Constant(rng.randrange(10**5, 10**6))
    last = func.body[-1]
    if (
        isinstance(last, ast.Assert)
        and isinstance(last.test, ast.Compare)
        and len(last.test.ops) == 1
        and isinstance(last.test.ops[0], ast.Eq)
    ):
        last.test.comparators = [ast.Tuple([last.test.comparators[0], k], ast.Load())]
        return
    call = last.value if isinstance(last, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("assertEqual", "assertEquals")
        and len(call.args) == 2
    ):
        call.args[1] = ast.Tuple([call.args[1], k], ast.Load())
        return
    a = rng.randrange(10, 99)
    func.body.append(ast.Assert(ast.Compare(ast.Constant(a), [ast.Eq()], [k])))


def _fresh_name(base: str, taken: set[str], rng: random.Random) -> str:
    for _ in range(50):
        name = f"{base}_{rng.choice(WORDS)}"
        if name not in taken:
            taken.add(name)
            return name
    name = f"{base}_{rng.randrange(10**6)}"
    taken.add(name)
    return name


def _names(tree: ast.Module) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def legacy_plan(
    sources: dict[str, str],
    fail_to_pass: tuple[str, ...],
    pass_to_pass: tuple[str, ...],
    rng: random.Random | None = None,
) -> CanaryPlan:
    """Canaries for the test files in ``sources`` (path -> text after the hidden tests went in)."""
    rng = rng or random.SystemRandom()
    trees: dict[str, ast.Module] = {}
    for path, text in sources.items():
        if len(text) > SOURCE_CAP:
            continue
        try:
            trees[path] = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
    if not trees:
        return CanaryPlan([], {})
    taken = {path: _names(tree) for path, tree in trees.items()}
    inserts: dict[str, list[str]] = {p: [] for p in trees}  # appended to the file
    canaries: list[Canary] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    candidates = list(dict.fromkeys(fail_to_pass))
    rng.shuffle(candidates)
    for test_id in candidates:
        if sum(c.expect == "fail" for c in canaries) >= MUST_FAIL:
            break
        path, names = _split(test_id)
        if path not in trees or not names or (path, tuple(names)) in seen:
            continue
        seen.add((path, tuple(names)))
        found = _find(trees[path], names)
        if found is None or not _copyable(found[1]):
            continue
        func = copy.deepcopy(found[1])
        func.name = _fresh_name(func.name, taken[path], rng)
        _perturb(func, rng)
        text = "\n\n" + ast.unparse(func) + "\n"
        if len(names) > 1:  # a method: attach it to its class, leave no module-level test
            owner = ".".join(names[:-1])
            text += f"{owner}.{func.name} = {func.name}\ndel {func.name}\n"
        inserts[path].append(text)
        node = "::".join([path, *names[:-1], func.name])
        canaries.append(Canary(path, node, "fail", test_id))
    while sum(c.expect == "fail" for c in canaries) < MUST_FAIL:
        canaries.append(_synthetic(trees, taken, inserts, fail_to_pass, "fail", rng))
    canaries.append(_synthetic(trees, taken, inserts, pass_to_pass or fail_to_pass, "pass", rng))
    files = {p: _insert(sources[p], ins) for p, ins in inserts.items() if ins}
    return CanaryPlan(canaries, files)


def _synthetic(
    trees: dict[str, ast.Module],
    taken: dict[str, set[str]],
    inserts: dict[str, list[str]],
    like: tuple[str, ...],
    expect: str,
    rng: random.Random,
) -> Canary:
    """A test named like a test in ``like`` (or any test), in its class if it has one."""
    by_file = [
        (p, n) for p, n in (_split(t) for t in like) if p in trees and n and _find(trees[p], n)
    ]
    path, names = rng.choice(by_file) if by_file else (rng.choice(sorted(trees)), ["test"])
    name = _fresh_name(names[-1] if names[-1].startswith("test") else "test", taken[path], rng)
    a, b = rng.randrange(2, 999), rng.randrange(2, 999)
    total = a + b if expect == "pass" else a + b + rng.randrange(1, 9)
    owner = ".".join(names[:-1])
    text = (
        f"\n\ndef {name}({'self' if owner else ''}):\n"
        f"    values = [{a}, {b}]\n    assert sum(values) == {total}\n"
    )
    if owner:
        text += f"{owner}.{name} = {name}\ndel {name}\n"
    inserts[path].append(text)
    return Canary(path, "::".join([path, *names[:-1], name]), expect)


def _insert(text: str, blocks: list[str]) -> str:
    """``text`` with ``blocks`` appended (every original line stays where it was)."""
    if text and not text.endswith("\n"):
        text += "\n"
    return text + "".join(blocks)

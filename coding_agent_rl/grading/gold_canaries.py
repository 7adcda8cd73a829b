"""Fresh-input canaries: copies of a fail-to-pass test with changed inputs, expected values from
the gold code.

:func:`probes` changes one literal argument of the call whose result a test compares (or one
input of each ``parametrize`` case: a letter to a letter, a digit to a digit, a number by a small
step) and swaps the assertion for a recorder; :func:`parse_records` keeps values that are
standard literals two runs agree on; :func:`derive` fills them in; :func:`render_pass` and
:func:`render_fail` (gold values moved one place, :func:`.perturb.value_line`) make the copies.
A forger that only knows the hidden test's own inputs must compute outputs for inputs it never
saw. Store and integration: :mod:`.gold_store`, docs/modules/grading.md.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import random
import string
from typing import Any

from coding_agent_rl.grading.perturb import value_line

PROBE_ENV = "CAR_GOLD_PROBE_OUT"
MAX_TESTS = 32  # fail-to-pass tests per file given fresh-input variants
MAX_REPR = 4096  # recorded values longer than this (as repr) are dropped
_ASSERT_EQUAL = ("assertEqual", "assertEquals", "assertListEqual", "assertDictEqual")


@dataclasses.dataclass(frozen=True)
class Variant:
    """A test copy with changed inputs: ``text`` has the original name and ``EXPECTED`` markers
    (one per case) where the recorded values go; ``values`` is filled by :func:`derive`."""

    file: str
    scope: tuple[str, ...]  # (name,) or (class, name)
    source: str  # the task's node id (no parameters)
    text: str
    keys: tuple[str, ...]  # probe keys, one per expected site
    values: tuple[Any, ...] = ()
    probe: str = ""  # the test recording its compared value(s) (preparation only)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "scope": list(self.scope),
            "source": self.source,
            "text": self.text,
            "keys": list(self.keys),
            "values": [repr(v) for v in self.values],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Variant:
        return cls(
            str(d["file"]),
            tuple(d["scope"]),
            str(d["source"]),
            str(d["text"]),
            tuple(d["keys"]),
            tuple(ast.literal_eval(v) for v in d["values"]),
        )


def _marker(i: int) -> str:
    return f"__CAR_EXPECTED_{i}__"


def _lit(node: ast.AST) -> tuple[bool, Any]:
    if isinstance(node, (ast.Set, ast.Call, ast.Name)):
        return False, None
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _mutated(value: Any, rng: random.Random) -> Any | None:
    """A same-type value one place away (for an expected value: :func:`.perturb.value_line`)."""
    line = value_line(value, 1, rng)
    if line is None:
        return None
    values, j = line
    return values[1 - j]


_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


def _changed_input(value: Any, rng: random.Random) -> Any | None:
    """``value`` with one place changed within its kind: a letter to another letter of the same
    case, a digit to a digit, a number by a small step, one item of a list/tuple/dict value.
    Punctuation and whitespace stay, so the input stays the kind of input the test exercises."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value + rng.choice(
            [d for d in range(-3, 4) if d and (value >= 0) <= (value + d >= 0)]
        )
    if isinstance(value, float):
        return (
            None
            if not math.isfinite(value)
            else float(f"{value + rng.choice([-1, 1]) * (abs(value) or 1) / 10:.12g}")
        )
    if isinstance(value, str):
        places = [(i, c) for i, ch in enumerate(value) for c in _CLASSES if ch in c]
        if not places:
            return None
        i, cls = rng.choice(places)
        return value[:i] + rng.choice(cls.replace(value[i], "")) + value[i + 1 :]
    if isinstance(value, (list, tuple)) and value:
        slots = [i for i, v in enumerate(value) if _changed_input(v, random.Random(0)) is not None]
        if not slots:
            return None
        i = rng.choice(slots)
        items = list(value)
        items[i] = _changed_input(items[i], rng)
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and value:
        keys = [k for k, v in value.items() if _changed_input(v, random.Random(0)) is not None]
        if not keys:
            return None
        k = rng.choice(keys)
        return {**value, k: _changed_input(value[k], rng)}
    return None


class _Lines:
    def __init__(self, text: str):
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.text = text

    def off(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + len(self.lines[lineno - 1].encode()[:col].decode())

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.off(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.off(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )


def _edit(text: str, base: int, edits: list[tuple[int, int, str]]) -> str:
    for a, b, new in sorted(edits, reverse=True):
        text = text[: a - base] + new + text[b - base :]
    return text


def _compare(stmt: ast.stmt) -> tuple[ast.expr, ast.expr] | None:
    """``(actual, expected)`` of a top-level equality assertion."""
    if isinstance(stmt, ast.Assert):
        t = stmt.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            pair = t.left, t.comparators[0]
            return pair[::-1] if _lit(pair[0])[0] and not _lit(pair[1])[0] else pair
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in _ASSERT_EQUAL
        and len(call.args) >= 2
    ):
        return call.args[0], call.args[1]
    return None


def _parametrize(fn: ast.AST) -> tuple[ast.Call, list[str], list[list[ast.expr]]] | None:
    for d in getattr(fn, "decorator_list", []):
        if not (isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"):
            continue
        if len(d.args) < 2 or not isinstance(d.args[0], ast.Constant):
            return None
        names = [n.strip() for n in str(d.args[0].value).split(",") if n.strip()]
        if not isinstance(d.args[1], (ast.List, ast.Tuple)):
            return None
        cases = []
        for case in d.args[1].elts:
            if len(names) == 1:
                elts: list[ast.expr] = [case]
            elif isinstance(case, (ast.Tuple, ast.List)):
                elts = case.elts
            else:
                return None
            if len(elts) != len(names):
                return None
            cases.append(list(elts))
        return d, names, cases
    return None


def _find(tree: ast.Module, scope: list[str]) -> ast.FunctionDef | None:
    body: list[ast.stmt] = tree.body
    for part in scope[:-1]:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if cls is None:
            return None
        body = cls.body
    return next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == scope[-1]), None)


def _record(key_expr: str, actual: str) -> str:
    """One statement appending ``[key, repr(actual)]`` to the probe file (no helper needed)."""
    return (
        f"open(__import__('os').environ[{PROBE_ENV!r}], 'a').write("
        f"__import__('json').dumps([{key_expr}, repr({actual})]) + '\\n')"
    )


def probes(
    text: str, path: str, fail_to_pass: tuple[str, ...], rng: random.Random, *, per_test: int = 2
) -> tuple[list[Variant], list[str]]:
    """Variants of ``path``'s fail-to-pass tests, each with its probe (the test recording the
    compared value instead of asserting it), and why tests got none ("id: reason")."""
    tree = ast.parse(text)
    lines = _Lines(text)
    out: list[Variant] = []
    skipped: list[str] = []
    tests = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    tests = {n for n in tests if n.startswith("test")}
    ids = dict.fromkeys(t.split("[", 1)[0] for t in fail_to_pass if t.startswith(path + "::"))
    for k, test_id in enumerate(ids):
        scope = test_id.split("::")[1:]
        fn = _find(tree, scope) if scope else None
        if fn is None:
            skipped.append(f"{test_id}: not found")
            continue
        if k >= MAX_TESTS:
            skipped.append(f"{test_id}: over the {MAX_TESTS}-test cap")
            continue
        # Blinding renames the file's tests; a copy that names one would break under it.
        named = {
            getattr(n, "id", getattr(n, "attr", None)) for stmt in fn.body for n in ast.walk(stmt)
        }
        if named & tests:
            skipped.append(f"{test_id}: names another test")
            continue
        for n in range(per_test):
            made = _variant(fn, lines, path, tuple(scope), test_id, rng, n)
            if isinstance(made, str):
                skipped.append(f"{test_id}: {made}")
                break
            out.append(made)
    return out, skipped


def _variant(
    fn: ast.FunctionDef,
    lines: _Lines,
    path: str,
    scope: tuple[str, ...],
    test_id: str,
    rng: random.Random,
    n: int,
) -> Variant | str:
    pos = next((i for i in range(len(fn.body) - 1, -1, -1) if _compare(fn.body[i])), None)
    if pos is None:
        return "no top-level equality assertion"
    stmt = fn.body[pos]
    actual, expected = _compare(stmt)  # type: ignore[misc]
    first = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
    start = lines.starts[first - 1]
    end = lines.starts[fn.end_lineno or fn.lineno]
    base = lines.text[start:end]
    key = f"{test_id}~{n}"
    actual_src = ast.get_source_segment(lines.text, actual) or ""
    edits: list[tuple[int, int, str]] = []
    if _lit(expected)[0]:
        call = actual if isinstance(actual, ast.Call) else None
        args = [*call.args, *(k.value for k in call.keywords)] if call else []
        lits = [a for a in args if _lit(a)[0] and _changed_input(_lit(a)[1], rng) is not None]
        if not lits:
            return "no literal argument to change in the compared call"
        target = rng.choice(lits)
        edits.append((*lines.span(target), repr(_changed_input(_lit(target)[1], rng))))
        keys: tuple[str, ...] = (f"{key}#0",)
        marks = [(*lines.span(expected), _marker(0))]
        a, b = lines.span(actual)
        actual_src = _edit(lines.text[a:b], a, edits)
        record = _record(f"{key!r} + '#0'", actual_src)
    else:
        par = _parametrize(fn)
        if not isinstance(expected, ast.Name) or par is None or expected.id not in par[1]:
            return "expected value is neither a literal nor a parametrize argument"
        _, names, cases = par
        e = names.index(expected.id)
        inputs = [i for i in range(len(names)) if i != e]
        keys_l, marks = [], []
        for c, case in enumerate(cases):
            if not all(_lit(x)[0] for x in case):
                return "a parametrize case is not all literals"
            values = [_lit(x)[1] for x in case]
            movable = [i for i in inputs if _changed_input(values[i], rng) is not None]
            if not movable:
                return "a parametrize case has no literal input to change"
            i = rng.choice(movable)
            values[i] = _changed_input(values[i], rng)
            edits.append((*lines.span(case[i]), repr(values[i])))
            keys_l.append(f"{key}#{tuple(values[j] for j in inputs)!r}")
            marks.append((*lines.span(case[e]), _marker(c)))
        keys = tuple(keys_l)
        record = _record(
            f"{key!r} + '#' + repr(({''.join(names[i] + ', ' for i in inputs)}))", actual_src
        )
    if len(set(keys)) != len(keys):
        return "changed cases coincide"
    text = _edit(base, start, [*edits, *marks])
    probe = _edit(base, start, [*edits, (*lines.span(stmt), record)])
    return Variant(path, scope, test_id, text, keys, probe=probe)


def parse_records(outputs: list[str]) -> dict[str, Any]:
    """Key -> value recorded identically by every run in ``outputs`` (probe-file texts), where
    the value is a standard literal that round-trips through ``repr``."""
    runs: list[dict[str, str]] = []
    for out in outputs:
        got: dict[str, str] = {}
        for line in out.splitlines():
            try:
                k, v = json.loads(line)
            except (ValueError, TypeError):
                continue
            if isinstance(k, str) and isinstance(v, str):
                got[k] = v if got.get(k, v) == v else "\0"  # two calls disagree: dropped
        runs.append(got)
    if not runs:
        return {}
    kept: dict[str, Any] = {}
    for k, v in runs[0].items():
        if len(v) > MAX_REPR or any(r.get(k) != v for r in runs[1:]):
            continue
        try:
            value = ast.literal_eval(v)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if repr(value) == v:
            kept[k] = value
    return kept


def derive(variants: list[Variant], records: dict[str, Any]) -> list[Variant]:
    """The variants every case of which has a recorded value, with the values in place."""
    out = []
    for v in variants:
        if all(k in records for k in v.keys):
            out.append(dataclasses.replace(v, values=tuple(records[k] for k in v.keys), probe=""))
    return out


def probe_file(text: str, variants: list[Variant]) -> tuple[str, dict[str, str]]:
    """``text`` with each variant's probe appended (module level or in its class) under a fresh
    name, and probe name -> variant key prefix, for selecting with ``-k``."""
    lines = text.splitlines(keepends=True)
    inserts: dict[int, list[str]] = {}
    names: dict[str, str] = {}
    tail: list[str] = []
    tree = ast.parse(text)
    for i, v in enumerate(variants):
        name = f"test_car_gold_probe_{i}"
        names[name] = v.keys[0].split("#", 1)[0]
        body = _rename(v.probe, v.scope[-1], name)
        if len(v.scope) > 1:
            cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == v.scope[0])
            inserts.setdefault(cls.end_lineno or cls.lineno, []).append("\n" + body)
        else:
            tail.append("\n\n" + body)
    out = []
    for n, line in enumerate(lines, 1):
        out.append(line)
        if n in inserts:
            out.extend(["\n"] * (not line.endswith("\n")) + inserts[n])
    return "".join(out).rstrip("\n") + "\n" + "".join(tail), names


def _rename(text: str, old: str, new: str) -> str:
    head = f"def {old}("
    i = text.index(head)
    return text[:i] + f"def {new}(" + text[i + len(head) :]


def render_pass(variant: Variant, name: str) -> str:
    """The must-pass copy of ``variant`` under ``name``: the gold values expected."""
    return _fill(_rename(variant.text, variant.scope[-1], name), variant.values)


def render_fail(variant: Variant, name: str, rng: random.Random) -> str | None:
    """A must-fail copy: each gold value moved one place (same type), or None where none moves."""
    moved = []
    for value in variant.values:
        new = _mutated(value, rng)
        if new is None:
            return None
        moved.append(new)
    return _fill(_rename(variant.text, variant.scope[-1], name), tuple(moved))


def _fill(text: str, values: tuple[Any, ...]) -> str:
    for i, value in enumerate(values):
        text = text.replace(_marker(i), repr(value))
    return text


def fresh_texts(
    variants: list[Variant], files: set[str], taken: set[str], rng: random.Random
) -> list[tuple[Variant, str, str, str]]:
    """``(variant, blinded name, text, expect)`` per canary to add: for each variant in one of
    ``files``, a must-pass copy and (where the gold values move) a must-fail copy."""
    from coding_agent_rl.grading.blinding import blind_name

    out = []
    for v in variants:
        if v.file not in files or not v.values:
            continue
        name = blind_name(rng, taken)
        out.append((v, name, render_pass(v, name), "pass"))
        name = blind_name(rng, taken)
        failing = render_fail(v, name, rng)
        if failing is not None:
            out.append((v, name, failing, "fail"))
    return out

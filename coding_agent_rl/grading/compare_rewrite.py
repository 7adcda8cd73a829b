"""The hidden tests' comparisons, evaluated under the grader's equality.

:func:`rewrite` wraps each operand of a comparison in an ``assert`` (and in the ``unittest``
assertion methods) inside a test function with ``<alias>.v(...)``: the staged copy of
``compare_runtime.py`` under a per-run random name, imported at the end of the file so no line
moves. Text edits at AST positions: the rest of the file, and pytest's failure messages, stay as
they were. Why and what it cannot stop: docs/modules/grading.md.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import secrets

SOURCE = pathlib.Path(__file__).with_name("compare_runtime.py")
_UNITTEST_PAIR = frozenset(
    [
        "assertEqual",
        "assertEquals",
        "assertNotEqual",
        "assertNotEquals",
        "assertListEqual",
        "assertDictEqual",
        "assertTupleEqual",
        "assertSetEqual",
        "assertSequenceEqual",
        "assertMultiLineEqual",
        "assertCountEqual",
        "assertItemsEqual",
        "assertIn",
        "assertNotIn",
        "assertGreater",
        "assertGreaterEqual",
        "assertLess",
        "assertLessEqual",
        "assertAlmostEqual",
        "assertNotAlmostEqual",
        "failUnlessEqual",
        "failIfEqual",
    ]
)
_UNITTEST_TRUTH = frozenset(["assertTrue", "assertFalse", "assert_", "failUnless", "failIf"])


@dataclasses.dataclass
class Rewritten:
    text: str
    operands: int  # operands wrapped
    error: str | None = None  # why the file was left as it was


def new_alias() -> str:
    return f"car_cmp_{secrets.token_hex(6)}"


def helper_source(
    workdir: str, diff_path: str, exempt: list[str], own: list[list[str]] | None = None
) -> str:
    """The sandbox copy of the helper: its source plus the call that configures it. ``own``:
    ``[path, qualname]`` of each dunder consulted as the diff has it (the gold patch's)."""
    conf = {"workdir": workdir, "diff": diff_path, "exempt": sorted(exempt), "own": own or []}
    return SOURCE.read_text() + f"\n_activate({conf!r})\n"


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except Exception:
        return False
    return True


Operand = tuple[ast.expr, str]  # an operand and the comparisons it takes part in (e, o, i)


def _modes(op: ast.cmpop) -> tuple[str, str]:
    if isinstance(op, (ast.In, ast.NotIn)):
        return "e", "i"  # the item by ==, the container by its containment
    if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
        return "eo", "eo"
    return "e", "e"


def _operands(expr: ast.expr) -> list[Operand]:
    """The operands of every comparison in ``expr`` (nested ones too: ``v`` hands back the
    object itself unless the diff steers it); comparisons with ``is`` are left alone (a copy is
    never the same object)."""
    out: list[Operand] = []
    for test in ast.walk(expr):
        if not isinstance(test, ast.Compare):
            continue
        if any(isinstance(op, (ast.Is, ast.IsNot)) for op in test.ops):
            continue
        nodes = [test.left, *test.comparators]
        modes = [""] * len(nodes)
        for i, op in enumerate(test.ops):
            left, right = _modes(op)
            modes[i] += left
            modes[i + 1] += right
        out += [(n, "".join(sorted(set(m)))) for n, m in zip(nodes, modes, strict=True)]
    return out


def _call_operands(call: ast.Call) -> list[Operand]:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else None
    if name in _UNITTEST_PAIR:
        args = [a for a in call.args[:2] if not isinstance(a, ast.Starred)]
        nested = [o for a in args for o in _operands(a)]
        if name in ("assertIn", "assertNotIn") and len(args) == 2:
            return [(args[0], "e"), (args[1], "i"), *nested]
        ordered = name.startswith(("assertGreater", "assertLess"))
        return [(a, "eo" if ordered else "e") for a in args] + nested
    if name in _UNITTEST_TRUTH and call.args and not isinstance(call.args[0], ast.Starred):
        return _operands(call.args[0])
    return []


class _Finder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[Operand] = []
        self.depth = 0  # inside a function body

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:  # run at import: not a test's comparison
            self.visit(d)
        self.depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self.depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    def visit_Assert(self, node: ast.Assert) -> None:
        if self.depth:
            self.found.extend(_operands(node.test))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if self.depth:
            self.found.extend(_call_operands(node))
        self.generic_visit(node)


def _offsets(text: str) -> list[int]:
    """Character offset of each line's start (1-based line numbers index from 1)."""
    out, pos = [0, 0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        out.append(pos)
    return out


def _char(text_lines: list[str], starts: list[int], line: int, col: int) -> int:
    """AST (line, UTF-8 byte column) -> character offset into the text."""
    prefix = text_lines[line - 1].encode("utf-8", "surrogateescape")[:col]
    return starts[line] + len(prefix.decode("utf-8", "surrogateescape"))


def rewrite(text: str, alias: str) -> Rewritten:
    """``text`` with its test functions' comparison operands wrapped (see the module
    docstring); unchanged, with the reason, when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        return Rewritten(text, 0, f"{type(e).__name__}: {e}")
    finder = _Finder()
    try:
        finder.visit(tree)
    except RecursionError as e:
        return Rewritten(text, 0, f"RecursionError: {e}")
    operands = [
        (o, m)
        for o, m in finder.found
        if not _literal(o) and getattr(o, "end_lineno", None) is not None
    ]
    if not operands:
        return Rewritten(text, 0)
    lines = text.splitlines(keepends=True)
    starts = _offsets(text)
    # (offset, group, tie, text), applied right to left; each insertion lands left of those
    # already made at its offset: closes of inner operands end up first, opens of outer ones last
    edits: list[tuple[int, int, int, str]] = []
    seen = set()
    for node, mode in operands:
        assert node.end_lineno is not None and node.end_col_offset is not None
        a = _char(lines, starts, node.lineno, node.col_offset)
        b = _char(lines, starts, node.end_lineno, node.end_col_offset)
        if (a, b) in seen:  # one operand of two comparisons: wrapped once
            continue
        seen.add((a, b))
        edits.append((a, 1, -(b - a), f"{alias}.v("))
        edits.append((b, 0, b - a, ")" if mode == "e" else f", {mode!r})"))
    out = text
    for offset, _, _, piece in sorted(edits, key=lambda e: (-e[0], -e[1], -e[2])):
        out = out[:offset] + piece + out[offset:]
    sep = "" if out.endswith("\n") else "\n"
    out += f"{sep}import {alias}  # the grader's comparisons (see the grading docs)\n"
    try:
        ast.parse(out)
    except SyntaxError as e:  # never stage a file the rewrite broke
        return Rewritten(text, 0, f"rewrite left a syntax error: {e}")
    return Rewritten(out, len(operands))

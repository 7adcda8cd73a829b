"""Blinded test files: fresh random test names, shuffled definitions, canaries among them.

:class:`TestSource` rewrites a hidden test file as text so that no node id the agent could know
runs and neither names nor positions tell a canary from a hidden test; a file the rewrite could
change the meaning of is left as it is (:class:`NotBlindable`). Details:
docs/modules/grading.md.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import re

_DEF = re.compile(r"(?:async\s+)?def\s+")


class NotBlindable(Exception):
    """The file cannot be rewritten safely; the message says why."""


def blind_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = f"test_{rng.getrandbits(48):012x}"
        if name not in taken:
            taken.add(name)
            return name


def is_fixture(fn: ast.AST) -> bool:
    decorators = getattr(fn, "decorator_list", [])
    return any("fixture" in ast.dump(d) for d in decorators)


Func = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclasses.dataclass
class Unit:
    """A test definition: a module-level function, or a class with its test methods."""

    node: ast.stmt
    start: int  # char offset of its first line (decorators included)
    end: int  # char offset after its last line (newline included)
    methods: list[Unit] = dataclasses.field(default_factory=list)


class TestSource:
    """One test file, parsed, with the edits that blind it."""

    def __init__(self, text: str, wanted: set[str]):
        """``wanted``: names the task's ids give for this file (tests even if not ``test*``)."""
        if "\r" in text.replace("\r\n", ""):
            raise NotBlindable("a line ends in a bare \\r")
        self.text = text.replace("\r\n", "\n")
        try:
            self.text.encode("utf-8")
            self.tree = ast.parse(self.text)
        except (SyntaxError, ValueError, UnicodeError, RecursionError, MemoryError) as e:
            raise NotBlindable(f"does not parse here ({type(e).__name__})") from e
        self.lines = self.text.split("\n")
        self.starts = [0]
        for line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        odd = sorted(
            n for n in wanted if not n.startswith("test") and n != "runTest" and "." not in n
        )
        if odd:  # collected by a custom python_functions pattern: a test_ name may not match it
            raise NotBlindable(f"test {odd[0]!r} is not named test*")
        self.wanted = wanted
        self.units = self._units()
        self.funcs = {node_name(u.node) for u in self.units if not u.methods}
        self.method_names = {node_name(m.node) for u in self.units for m in u.methods}
        self._check()

    # ---- positions --------------------------------------------------------------------------

    def off(self, lineno: int, col: int) -> int:
        """Char offset of an ``ast`` position (``col`` counts UTF-8 bytes)."""
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.off(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.off(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def _line_end(self, lineno: int) -> int:
        return self.starts[lineno] if lineno < len(self.starts) else len(self.text)

    def _unit(self, stmt: ast.stmt, siblings: list[ast.stmt], i: int) -> Unit:
        first = min([d.lineno for d in getattr(stmt, "decorator_list", [])] + [stmt.lineno])
        last = stmt.end_lineno or stmt.lineno
        prev_end = siblings[i - 1].end_lineno if i else 0
        nxt = siblings[i + 1] if i + 1 < len(siblings) else None
        nxt_start = (
            min([d.lineno for d in getattr(nxt, "decorator_list", [])] + [nxt.lineno])
            if nxt
            else None
        )
        if (prev_end and prev_end >= first) or (nxt_start is not None and nxt_start <= last):
            raise NotBlindable(f"line {first}: definitions share a line")
        if not self.lines[first - 1].lstrip().startswith(("@", "def", "async", "class")):
            raise NotBlindable(f"line {first}: a definition does not start its line")
        return Unit(stmt, self.starts[first - 1], self._line_end(last))

    def _is_test(self, fn: ast.stmt) -> bool:
        return (
            isinstance(fn, Func)
            and (fn.name.startswith("test") or fn.name in self.wanted)
            and not is_fixture(fn)
        )

    def _units(self) -> list[Unit]:
        body = self.tree.body
        units = []
        for i, stmt in enumerate(body):
            if self._is_test(stmt):
                units.append(self._unit(stmt, body, i))
            elif isinstance(stmt, ast.ClassDef) and any(self._is_test(s) for s in stmt.body):
                unit = self._unit(stmt, body, i)
                if stmt.body[0].lineno <= stmt.lineno:
                    raise NotBlindable(f"line {stmt.lineno}: class header and body on one line")
                unit.methods = [
                    self._unit(s, stmt.body, j) for j, s in enumerate(stmt.body) if self._is_test(s)
                ]
                units.append(unit)
        return units

    # ---- safety -----------------------------------------------------------------------------

    def _check(self) -> None:
        renamed = self.funcs | self.method_names
        for node in ast.walk(self.tree):
            if isinstance(node, ast.arg) and node.arg in renamed:
                raise NotBlindable(f"line {node.lineno}: test name {node.arg!r} is a parameter")
        for name, lineno in _import_time_names(self.tree):
            if name in renamed:
                raise NotBlindable(f"line {lineno}: test name {name!r} used at import time")

    # ---- edits ------------------------------------------------------------------------------

    def def_span(self, fn: ast.stmt) -> tuple[int, int]:
        """Where ``fn``'s name is spelled in its ``def`` line."""
        start = self.off(fn.lineno, fn.col_offset)
        m = _DEF.match(self.text, start)
        name = node_name(fn)
        if m is None or self.text[m.end() : m.end() + len(name)] != name:
            raise NotBlindable(f"line {fn.lineno}: cannot find the name of {name!r}")
        return m.end(), m.end() + len(name)

    def rename_edits(self, names: dict[str, str]) -> list[tuple[int, int, str]]:
        """Edits giving every test its blinded name, definitions and references."""
        edits = []
        for unit in self.units:
            for u in unit.methods or [unit]:
                a, b = self.def_span(u.node)
                edits.append((a, b, names[node_name(u.node)]))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and node.id in self.funcs:
                a, b = self.span(node)
                edits.append((a, b, names[node.id]))
            elif isinstance(node, ast.Attribute) and node.attr in self.method_names:
                a, b = self.span(node)
                edits.append((b - len(node.attr), b, names[node.attr]))
        return edits

    def render(self, a: int, b: int, edits: list[tuple[int, int, str]], cuts=()) -> str:
        """``text[a:b]`` with ``edits`` applied and the ``cuts`` ranges left out."""
        out, pos = [], a
        marks = sorted(
            [(s, e, t) for s, e, t in edits if a <= s and e <= b]
            + [(s, e, None) for s, e in cuts if a <= s and e <= b]
        )
        for s, e, t in marks:
            if s < pos:  # inside a cut range: rendered with its own unit
                continue
            out.append(self.text[pos:s])
            if t is not None:
                out.append(t)
            pos = e
        out.append(self.text[pos:b])
        return "".join(out)


def node_name(node: ast.AST) -> str:
    return str(getattr(node, "name", ""))


def _import_time_names(tree: ast.Module) -> list[tuple[str, int]]:
    """Names loaded while the module (and its class bodies) executes: not in function bodies."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (*Func, ast.Lambda)):
            for d in getattr(node, "decorator_list", []):
                visit(d)
            for d in node.args.defaults + [x for x in node.args.kw_defaults if x is not None]:
                visit(d)
            return
        if isinstance(node, ast.Name):
            out.append((node.id, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in tree.body:
        visit(stmt)
    return out


def assemble(
    src: TestSource,
    edits: list[tuple[int, int, str]],
    extra_funcs: list[str],
    extra_methods: dict[str, list[str]],
    rng: random.Random,
) -> str:
    """The blinded file: every statement where it was, test classes included (their methods, and
    the ``extra`` ones: canaries, rendered already, in random order inside them); module-level
    test functions (and the extra ones) in random order after the last statement. A class stays
    in place because the statements around it may use it (a subclass, a ``del``, a decorator)."""
    fills = []
    for u in src.units:
        if not u.methods:
            continue
        name = node_name(u.node)
        methods = [src.render(m.start, m.end, edits) for m in u.methods]
        methods += extra_methods.get(name, [])
        rng.shuffle(methods)
        shell = src.render(u.start, u.end, edits, [(m.start, m.end) for m in u.methods])
        body = "\n".join(m.rstrip("\n") + "\n" for m in methods)
        fills.append((u.start, u.end, shell.rstrip("\n") + "\n\n" + body))
    cuts = [(u.start, u.end) for u in src.units if not u.methods]
    header = src.render(0, len(src.text), edits + fills, cuts).rstrip("\n") + "\n"
    funcs = [src.render(u.start, u.end, edits) for u in src.units if not u.methods] + extra_funcs
    rng.shuffle(funcs)
    return header + "".join("\n\n" + t.rstrip("\n") + "\n" for t in funcs)

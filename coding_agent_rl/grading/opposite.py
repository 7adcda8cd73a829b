"""Must-fail copies that ask for the opposite of a test's last check.

For a fail-to-pass test with no literal expected value to edit: an ``assert X`` becomes
``(not (X)) is False`` in the original and ``... is True`` in its copy; ``assertTrue`` becomes
``assertFalse`` (and the other unittest pairs); a ``pytest.raises`` / ``assertRaises`` block runs
bare. Code that passes the original fails the copy, whatever it is; a result that reads the
assertion it is in to make it hold passes both. Such a pass is evidence only beside a passing
original (:func:`contradicts`). Details: docs/modules/grading.md.
"""

from __future__ import annotations

import ast

from coding_agent_rl.grading.blinding import TestSource

Edit = tuple[int, int, str]

_NEGATED = {
    "assertTrue": "assertFalse",
    "assertIsNone": "assertIsNotNone",
    "assertIn": "assertNotIn",
    "assertIs": "assertIsNot",
    "assertIsInstance": "assertNotIsInstance",
    "assertRegex": "assertNotRegex",
}
_NEGATED |= {v: k for k, v in _NEGATED.items()}
# The context managers / calls that expect an exception, and where the callable sits in the call
# form (``pytest.raises(E, f, *args)``).
_RAISES = {"raises": 1, "assertRaises": 1, "assertRaisesRegex": 2}
_NEVER_BARE = {"KeyboardInterrupt", "BaseException"}  # raised bare, they stop the whole run


def _raises_call(node: ast.AST) -> tuple[ast.Call, int] | None:
    """``node`` as a ``pytest.raises`` / ``raises`` / ``self.assertRaises*`` call."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr in _RAISES:
        ok = f.attr != "raises" or (isinstance(f.value, ast.Name) and f.value.id == "pytest")
    else:
        ok = isinstance(f, ast.Name) and f.id == "raises"
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    expected = {n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name)}
    if not ok or expected & _NEVER_BARE:
        return None
    return node, _RAISES[name]


def _string_interiors(node: ast.AST) -> set[int]:
    """Line numbers inside multi-line string literals (their indentation is content)."""
    out: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.Constant, ast.JoinedStr)) and (n.end_lineno or 0) > n.lineno:
            out.update(range(n.lineno + 1, (n.end_lineno or 0) + 1))
    return out


def _bare_block(src: TestSource, stmt: ast.With) -> list[Edit] | None:
    """Edits that drop ``stmt``'s ``with`` header and dedent its body by one level."""
    lines = src.lines
    head = lines[stmt.lineno - 1]
    outer = head[: len(head) - len(head.lstrip())]
    first = stmt.body[0].lineno
    if (
        outer.strip()
        or len(outer) != stmt.col_offset
        or first <= stmt.lineno
        or (stmt.body[0].col_offset <= len(outer))
    ):
        return None
    inner = lines[first - 1][: stmt.body[0].col_offset]
    if inner.strip() or not inner.startswith(outer):
        return None
    edits: list[Edit] = [(src.starts[stmt.lineno - 1], src.starts[first - 1], "")]
    skip = _string_interiors(stmt)
    for n in range(first, (stmt.end_lineno or first) + 1):
        if n not in skip and lines[n - 1].startswith(inner):
            a = src.starts[n - 1] + len(outer)
            edits.append((a, a + len(inner) - len(outer), ""))
    return edits


def _bare_call(src: TestSource, call: ast.Call, at: int) -> list[Edit] | None:
    """Edits turning ``raises(E, f, *args)`` into ``f(*args)``."""
    if len(call.args) <= at or any(isinstance(a, ast.Starred) for a in call.args[: at + 1]):
        return None
    if any(k.arg is None for k in call.keywords):  # ``**kw``: its span starts after the stars
        return None
    a, _ = src.span(call)
    f_start, f_end = src.span(call.args[at])
    rest = [*call.args[at + 1 :], *call.keywords]
    _, call_end = src.span(call)
    nxt = min((src.span(r)[0] for r in rest), default=call_end - 1)
    return [(a, f_start, ""), (f_end, nxt, "(")]


def opposite_edits(src: TestSource, fn: ast.AST) -> tuple[list[Edit], list[Edit]] | str:
    """``(edits to the original, edits making the copy)`` for the last top-level check of
    ``fn`` that has an opposite, or why there is none."""
    for stmt in reversed(getattr(fn, "body", [])):
        if isinstance(stmt, ast.Assert):
            a, b = src.span(stmt.test)
            return (
                [(a, a, "(not ("), (b, b, ")) is False")],
                [(a, a, "(not ("), (b, b, ")) is True")],
            )
        value = getattr(stmt, "value", None)
        if isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(value, ast.Call):
            f = value.func
            if isinstance(stmt, ast.Expr) and isinstance(f, ast.Attribute) and f.attr in _NEGATED:
                _, end = src.span(f)
                return [], [(end - len(f.attr), end, _NEGATED[f.attr])]
            found = _raises_call(value)
            if found is not None and (edits := _bare_call(src, *found)) is not None:
                return [], edits
        if (
            isinstance(stmt, ast.With)
            and len(stmt.items) == 1
            and _raises_call(stmt.items[0].context_expr) is not None
            and (edits := _bare_block(src, stmt)) is not None
        ):
            return [], edits
    return "no top-level assertion, unittest check or raises block to negate"


def contradicts(copy_id: str, node: str, source: str, tests: dict[str, str]) -> bool:
    """Whether an opposite copy's pass sits beside its original's pass (same parameters)."""
    return tests.get(source + copy_id[len(node) :]) in ("PASSED", "XPASS")

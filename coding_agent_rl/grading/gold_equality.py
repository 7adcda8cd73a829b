"""Which comparison dunders the gold patch itself writes, so the grader's equality trusts them.

Under ``strict_compare`` a dunder the agent's diff wrote is not consulted. Where the task's own
fix *is* such a dunder (the issue is "``Version.__eq__`` ignores the local part"), an honest fix
must write it too; so each dunder method the gold patch adds, removes or changes is named here
(``{path: [qualname, ...]}``, e.g. ``{"pkg/v.py": ["Version.__eq__"]}``), from the base file and
the gold patch's hunks, and the helper consults the diff's version of exactly those. Computed on
the host: the gold patch never enters a grading sandbox. Details: docs/modules/grading.md.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from coding_agent_rl.patches.files import FilePatch, lines_of, split_patch

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DUNDER = re.compile(r"^__[a-z][a-z0-9_]*__$")
MAX_SOURCE = 2 * 1024 * 1024  # a base file larger than this is not parsed (nothing exempted)


def gold_py_sources(patch: str, test_files: tuple[str, ...] | list[str]) -> list[str]:
    """The existing (old-side) Python files the gold patch changes, test files left out: the
    base text :func:`gold_dunders` needs."""
    tests = set(test_files)
    return sorted(
        {
            fp.old_path
            for fp in split_patch(patch)
            if fp.old_path and fp.old_path.endswith(".py") and fp.old_path not in tests
        }
    )


def _hunks(fp: FilePatch) -> list[tuple[int, int, list[str]]]:
    """(old start, old count, body lines) per hunk."""
    out: list[tuple[int, int, list[str]]] = []
    for line in lines_of(fp.text):
        m = _HUNK.match(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2) or 1), []))
        elif out and line[:1] in (" ", "+", "-"):
            out[-1][2].append(line)
    return out


def _sides(
    base: list[str], hunks: list[tuple[int, int, list[str]]]
) -> tuple[str, set[int], set[int]]:
    """The post-image, the old-side lines touched (removed, or beside an insertion) and the
    new-side lines added."""
    new: list[str] = []
    old_touched: set[int] = set()
    new_added: set[int] = set()
    at = 1  # next base line (1-based) not yet copied
    for start, count, body in hunks:
        first = start + 1 if count == 0 else start  # a pure insertion goes after line `start`
        new.extend(base[at - 1 : first - 1])
        at = max(at, first)
        for line in body:
            kind, text = line[:1], line[1:]
            if kind == " ":
                new.append(text)
                at += 1
            elif kind == "-":
                old_touched.add(at)
                at += 1
            else:
                old_touched.update((max(at - 1, 1), at))
                new.append(text)
                new_added.add(len(new))
    new.extend(base[at - 1 :])
    return "".join(new), old_touched, new_added


def _dunders(source: str, lines: set[int]) -> set[str]:
    """Qualnames of the dunder methods (of classes) whose span holds one of ``lines``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    found: set[str] = set()

    def walk(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                last = child.end_lineno or child.lineno
                if (
                    in_class
                    and _DUNDER.match(child.name)
                    and any(first <= n <= last for n in lines)
                ):
                    found.add(prefix + child.name)
                walk(child, f"{prefix}{child.name}.<locals>.", False)
            else:
                walk(child, prefix, in_class)

    walk(tree, "", False)
    return found


def gold_dunders(patch: str, base: Mapping[str, str]) -> dict[str, list[str]]:
    """``{new path: sorted qualnames}`` of the class dunder methods the gold ``patch`` writes,
    given the base text of each existing file it changes (``base``; a missing one is new)."""
    out: dict[str, list[str]] = {}
    for fp in split_patch(patch or ""):
        if not fp.new_path or not fp.new_path.endswith(".py"):
            continue
        text = base.get(fp.old_path or "", "") if fp.old_path else ""
        if len(text) > MAX_SOURCE:
            continue
        post, old_lines, new_lines = _sides(lines_of(text), _hunks(fp))
        names = _dunders(post, new_lines)
        if text:
            names |= _dunders(text, old_lines)
        if names:
            out[fp.new_path] = sorted(names)
    return out


def own_pairs(dunders: Mapping[str, list[str]]) -> list[list[str]]:
    """``[path, qualname]`` pairs for the helper: each dunder the gold writes, and ``__hash__``
    beside its ``__eq__`` (defining ``__eq__`` unsets the inherited hash, so an honest fix
    restores it)."""
    out: set[tuple[str, str]] = set()
    for path, names in dunders.items():
        for name in names:
            out.add((path, name))
            if name.endswith(".__eq__"):
                out.add((path, name[: -len("__eq__")] + "__hash__"))
    return [list(p) for p in sorted(out)]

"""The import graph: the layer contract of pyproject.toml holds, and no module imports itself
through others (no cycle at any level, not only between layers)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import grimp

ROOT = pathlib.Path(__file__).parents[1]


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    deps = graph.find_modules_directly_imported_by(child) & modules
                    work.append((child, iter(sorted(deps))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles():
    graph = grimp.build_graph("coding_agent_rl")
    modules = {m for m in graph.modules if ".examples" not in m}
    assert cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert cycles(graph, {"p.a", "p.b", "p.c"}) == [["p.a", "p.b"]]


def test_the_layer_contract_holds():
    r = subprocess.run(
        [str(pathlib.Path(sys.executable).with_name("lint-imports"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "4 kept, 0 broken" in r.stdout, r.stdout[-3000:]

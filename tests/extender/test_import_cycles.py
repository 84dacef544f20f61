"""No module of a shell imports, directly or around a circle, a module that imports it back: a circle
(even under TYPE_CHECKING, or inside a function, which grimp counts too) makes the import order matter and
hides which module owns what (issue 36). import-linter has no contract for cycles inside a package, so
this walks grimp's graph (the one import-linter builds)."""

from __future__ import annotations

import grimp
import pytest

SHELLS = ("webhook.extender", "webhook.admission", "webhook.deviceplugin", "webhook.dra", "webhook.cli")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("webhook")


def circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected groups of more than one module among `package`'s modules (Tarjan)."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    inside = set(modules)
    edges = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("package", SHELLS)
def test_a_shell_has_no_import_circle(graph: grimp.ImportGraph, package: str) -> None:
    assert circles(graph, package) == []


def test_a_circle_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    assert circles(graph, "pkg") == []
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert circles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.c"]]

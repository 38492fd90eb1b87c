"""kclient has no import cycles, between modules or between its folders.

Every import statement counts, wherever it is written: at module level, inside a function, or
under ``if TYPE_CHECKING:`` (a cycle hidden in a function still ties the two modules together).
Relative imports are resolved; importing a package counts as importing its ``__init__``; in
``from package import name`` the name counts as the submodule when there is one. The folder
graph has one node per folder directly under kclient/ (``kclient/group`` holds
``group/assignors`` too) and one per top-level module (``kclient/settings.py``).
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
import repo_paths

REPO = repo_paths.REPO


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # path:line of the import statement


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the package directory ``root``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (``a.b.func`` -> ``a.b``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_edges(root: Path) -> list[Edge]:
    """Every import of one module of the package ``root`` by another, with where it is written."""
    modules = module_names(root)
    edges = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        where_base = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve_base(module, is_package, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                resolved = _known(target, modules)
                if resolved is not None and resolved != module:
                    edges.append(Edge(module, resolved, f"{where_base}:{node.lineno}"))
    return edges


def folder_of(module: str, root: Path) -> str:
    """``kclient.group.assignors.range`` -> ``kclient/group``; ``kclient.settings`` -> ``kclient/settings.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return f"{root.name}/__init__.py"
    if (root / parts[1]).is_dir():
        return f"{root.name}/{parts[1]}"
    return f"{root.name}/{parts[1]}.py"


def folder_edges(edges: Iterable[Edge], root: Path) -> list[Edge]:
    """The module edges between different folders (or top-level modules) of the package ``root``."""
    out = []
    for e in edges:
        source, target = folder_of(e.source, root), folder_of(e.target, root)
        if source != target:
            out.append(Edge(source, target, e.where))
    return out


def find_cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """Shortest cycles, as their edges, until every node that lies on a cycle is on one of them."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        graph.setdefault(e.source, {}).setdefault(e.target, e)
        graph.setdefault(e.target, {})
    cycles = []
    for component in sorted(_components(graph), key=min):
        covered: set[str] = set()
        for start in sorted(component):
            if len(component) > 1 and start not in covered:
                cycle = _shortest_cycle(graph, component, start)
                covered.update(e.source for e in cycle)
                cycles.append(cycle)
    return cycles


def _shortest_cycle(graph: Mapping[str, Mapping[str, Edge]], component: set[str], start: str) -> list[Edge]:
    """Breadth-first from ``start`` within its strongly connected component, back to ``start``."""
    parent: dict[str, Edge] = {}
    frontier, seen = [start], {start}
    while frontier:
        nxt = []
        for node in frontier:
            for target, edge in sorted(graph[node].items()):
                if target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, parent[path[0].source])
                    return path
                if target in component and target not in seen:
                    seen.add(target)
                    parent[target] = edge
                    nxt.append(target)
        frontier = nxt
    raise AssertionError(f"{start} is on no cycle of its component")


def _components(graph: Mapping[str, Mapping[str, Edge]]) -> list[set[str]]:
    """Strongly connected components (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def describe(cycles: list[list[Edge]]) -> str:
    lines = []
    for cycle in cycles:
        lines.append(" -> ".join([cycle[0].source] + [e.target for e in cycle]))
        lines.extend(f"    {e.source} -> {e.target} at {e.where}" for e in cycle)
    return "\n".join(lines)


# The tree itself.

def test_no_module_import_cycles_in_kclient():
    cycles = find_cycles(import_edges(REPO / "kclient"))
    assert not cycles, "import cycles between kclient modules:\n" + describe(cycles)


def test_no_folder_import_cycles_in_kclient():
    cycles = find_cycles(folder_edges(import_edges(REPO / "kclient"), REPO / "kclient"))
    assert not cycles, "import cycles between kclient's folders:\n" + describe(cycles)


# The finder, on small planted trees.

def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_finder_reports_a_cycle_hidden_in_a_function(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from . import a\n    return a\n",
    })
    cycles = find_cycles(import_edges(root))
    assert describe(cycles).splitlines()[0] == "pkg.a -> pkg.b -> pkg.a"
    assert [e.where for e in cycles[0]] == ["pkg/a.py:1", "pkg/b.py:2"]


def test_finder_reports_a_cycle_under_type_checking_and_through_a_package(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "sub/__init__.py": "from .inner import Thing\n",
        "sub/inner.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..top import Other\n",
        "top.py": "import pkg.sub\n",
    })
    cycles = find_cycles(import_edges(root))
    assert describe(cycles).splitlines()[0] == "pkg.sub -> pkg.sub.inner -> pkg.top -> pkg.sub"


def test_finder_reports_a_folder_cycle_without_a_module_cycle(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "x/__init__.py": "",
        "x/m.py": "from pkg.y.n import N\n",
        "x/k.py": "K = 1\n",
        "y/__init__.py": "",
        "y/n.py": "from ..x import k\nN = k.K\n",
        "settings.py": "import pkg.y.n\n",
    })
    edges = import_edges(root)
    assert find_cycles(edges) == []
    cycles = find_cycles(folder_edges(edges, root))
    assert describe(cycles).splitlines()[0] == "pkg/x -> pkg/y -> pkg/x"


def test_finder_accepts_a_tree_without_cycles(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "from .a import A\n",
        "a.py": "import os\nfrom .b import B\nA = B\n",
        "b.py": "from pkg.c import helper as B\n",
        "c.py": "def helper():\n    import json\n    return json\n",
    })
    edges = import_edges(root)
    assert {(e.source, e.target) for e in edges} == {("pkg", "pkg.a"), ("pkg.a", "pkg.b"), ("pkg.b", "pkg.c")}
    assert find_cycles(edges) == []
    assert find_cycles(folder_edges(edges, root)) == []

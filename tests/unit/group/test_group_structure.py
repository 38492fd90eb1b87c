"""The group layer's shape: no import cycle inside kclient/group/, no import of kclient.consumer,
and no module reading another module's private names.

Imports are read with ``ast`` from the source, including those under ``if TYPE_CHECKING:`` and
inside functions (a function-local import still makes a cycle). A private name is one that
starts with one underscore: ``from m import _name`` and ``import m._private`` are refused, and so is ``obj._attr`` unless
``_attr`` is an attribute the same module defines itself (``self._attr = ...`` or a class body
assignment) or the access is on ``self``/``cls``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kclient

ROOT = Path(kclient.__file__).parent
GROUP = ROOT / "group"
PACKAGE = "kclient.group"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(GROUP.rglob("*.py"))}


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


TREES = _trees()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import statement, wherever it is."""
    out = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            out.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            names = [alias.name for alias in node.names]
            out.append((target, names, node.lineno))
            # ``from kclient.group import x`` may name a submodule
            out.extend((f"{target}.{n}", [], node.lineno) for n in names if f"{target}.{n}" in MODULES)
    return out


def _group_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _names, _line in _imports(name):
            # importing a.b.c runs a and a.b too, except the packages that contain this module
            # (they are imported before it; a package may import its submodules)
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in MODULES and prefix != name and not name.startswith(prefix + "."):
                    graph[name].add(prefix)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_attributes(tree: ast.Module) -> set[str]:
    """Private attribute names a module defines itself: ``self._x = ...``, class-level
    ``_x = ...``/``_x: T``, ``__slots__`` entries and its own private functions."""
    own: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    own.add(sub.attr)
                elif isinstance(sub, ast.Name):
                    own.add(sub.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
    return {n for n in own if _is_private(n)}


def test_group_has_no_import_cycle():
    cycle = _find_cycle(_group_graph())
    assert cycle is None, "import cycle in kclient/group/: " + " -> ".join(cycle or [])


def test_cycle_finder_sees_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_group_does_not_import_the_consumer_layer(module):
    bad = [(target, line) for target, _n, line in _imports(module)
           if target == "kclient.consumer" or target.startswith("kclient.consumer.")]
    assert not bad, f"{module} imports the consumer layer (group/ sits below it): {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_group_imports_no_private_names(module):
    bad = [(target, n, line) for target, names, line in _imports(module) for n in names if _is_private(n)]
    bad += [(target, "", line) for target, _names, line in _imports(module)
            if any(_is_private(part) for part in target.split("."))]
    assert not bad, f"{module} imports private names or modules of other modules: {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_group_reads_no_private_attribute_of_another_module(module):
    tree = TREES[module]
    own = _own_attributes(tree)
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr in own:
            continue
        bad.append((ast.unparse(node), node.lineno))
    assert not bad, f"{module} reads private attributes it does not define: {bad}"

"""The type stubs of ``kclient`` and ``kclient.spark`` declare exactly the public names the
packages resolve at run time, each from the module it really comes from, so type checkers see
the real classes and functions (the packages import them lazily, which checkers cannot follow)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import repo_paths

REPO = repo_paths.REPO
PACKAGES = ["kclient", "kclient.spark"]


def _stub(package: str) -> tuple[dict[str, str], list[str], set[str]]:
    """(name -> module it is imported from, __all__, other names declared) of a package's stub."""
    path = REPO / Path(*package.split(".")) / "__init__.pyi"
    imported: dict[str, str] = {}
    all_names: list[str] = []
    declared: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, f"{path.name}: use absolute imports"
            for alias in node.names:
                # `import X as X` is how a stub re-exports a name.
                assert alias.asname == alias.name, f"{package} stub: {alias.name} is not re-exported"
                assert alias.name not in imported, f"{package} stub: {alias.name} imported twice"
                imported[alias.name] = node.module
        elif isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"]:
            all_names = ast.literal_eval(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
    return imported, all_names, declared


@pytest.mark.parametrize("package", PACKAGES)
def test_stub_declares_the_public_names_from_their_modules(package):
    module = importlib.import_module(package)
    imported, all_names, _ = _stub(package)
    assert sorted(all_names) == sorted(module.__all__), f"{package}: the stub's __all__ differs from the package's"
    assert set(imported) == set(module.__all__), (
        f"{package}: stub imports {sorted(set(imported) - set(module.__all__))} not public, "
        f"misses {sorted(set(module.__all__) - set(imported))}")
    assert imported == module._LAZY, f"{package}: a stub import names another module than the package resolves"


@pytest.mark.parametrize("package", PACKAGES)
def test_stub_names_exist_where_the_stub_says(package):
    imported, _, _ = _stub(package)
    for name, source in imported.items():
        assert hasattr(importlib.import_module(source), name), f"{source} has no {name}"


def test_stub_declares_the_version():
    import kclient
    _, _, declared = _stub("kclient")
    assert "__version__" in declared and isinstance(kclient.__version__, str)

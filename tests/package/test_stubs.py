"""Every compiled kcore module's .pyi stub matches what the extension really exports, so users'
type checkers see the real API (names and parameter names)."""
from __future__ import annotations

import ast
import importlib
import inspect
import pathlib

import pytest

import kcore
from repo_paths import REPO

SRC = REPO / "kcore"
MODULES = sorted(p.stem for p in SRC.glob("*.pyx"))


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if a.vararg:
        names.append(a.vararg.arg)
    names += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        names.append(a.kwarg.arg)
    return names


def _runtime_params(obj) -> list[str] | None:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return None  # slot wrappers and some builtins have no introspectable signature


def _check_function(runtime, fn: ast.FunctionDef, where: str) -> None:
    if fn.name.startswith("__"):
        return
    got = _runtime_params(runtime)
    if got is not None:
        assert got == _params(fn), f"{where}.{fn.name}: runtime {got} != stub {_params(fn)}"


@pytest.mark.parametrize("name", MODULES)
def test_stub_matches_runtime(name):
    module = importlib.import_module(f"kcore.{name}")
    stub = pathlib.Path(kcore.__file__).with_name(f"{name}.pyi")
    tree = ast.parse(stub.read_text())
    declared = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            declared.add(node.name)
            assert hasattr(module, node.name), f"stub declares kcore.{name}.{node.name}, runtime lacks it"
            _check_function(getattr(module, node.name), node, f"kcore.{name}")
        elif isinstance(node, ast.ClassDef):
            declared.add(node.name)
            assert hasattr(module, node.name), f"stub declares class kcore.{name}.{node.name}, runtime lacks it"
            runtime_cls = getattr(module, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    attr = getattr(runtime_cls, item.name, None)
                    if attr is None and item.name in getattr(runtime_cls, "__annotations__", {}):
                        continue  # a Protocol data member that the stub declares read-only (a property)
                    assert attr is not None, f"kcore.{name}.{node.name}.{item.name} missing at runtime"
                    if not any(isinstance(d, ast.Name) and d.id in ("property", "staticmethod")
                               for d in item.decorator_list):
                        _check_function(attr, item, f"kcore.{name}.{node.name}")
        elif isinstance(node, (ast.AnnAssign, ast.Assign)):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            declared.update(t.id for t in targets if isinstance(t, ast.Name))
    public = set(getattr(module, "__all__", ()))
    missing = public - declared
    assert not missing, f"kcore.{name}.__all__ names missing from its stub: {sorted(missing)}"

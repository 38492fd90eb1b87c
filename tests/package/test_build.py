"""The installed package is the compiled one: no kcore module may come from source."""
import importlib
import importlib.machinery
import pathlib

import pytest

import kcore
from repo_paths import REPO

MODULES = sorted(p.stem for p in (REPO / "kcore").glob("*.pyx"))


def test_every_pyx_module_is_listed():
    assert MODULES, "no kcore/*.pyx found next to the tests"


@pytest.mark.parametrize("name", MODULES)
def test_kcore_module_is_a_compiled_extension(name):
    mod = importlib.import_module(f"kcore.{name}")
    path = mod.__file__
    assert any(path.endswith(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES), (
        f"kcore.{name} was imported from {path}, not from a compiled extension"
    )
    assert isinstance(mod.__loader__, importlib.machinery.ExtensionFileLoader)


# Modules with nothing to cimport: a .pxd would be an empty file.
NO_C_API = {"errors": "Python exception classes only",
            "sharerecords": "functions called from Python only"}


@pytest.mark.parametrize("name", MODULES)
def test_kcore_module_ships_pxd_and_pyi(name):
    pkg = pathlib.Path(kcore.__file__).parent
    assert (pkg / f"{name}.pyi").exists(), f"kcore/{name}.pyi not installed"
    if name in NO_C_API:
        assert not (pkg / f"{name}.pxd").exists(), f"kcore/{name}.pxd exists: drop it from NO_C_API"
        return
    assert (pkg / f"{name}.pxd").exists(), f"kcore/{name}.pxd not installed"

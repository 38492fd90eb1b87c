"""kcore stands alone: it imports nothing from kclient, and kclient's errors are kcore's."""
from __future__ import annotations

import subprocess
import sys

import pytest

import kclient.errors as client_errors
import kcore.errors as core_errors
from repo_paths import REPO

KCORE = REPO / "kcore"
SOURCES = sorted(p for ext in ("pyx", "pxd", "pyi", "py", "h") for p in KCORE.glob(f"*.{ext}"))
MODULES = sorted(p.stem for p in KCORE.glob("*.pyx"))


def test_no_kcore_source_mentions_kclient():
    assert SOURCES
    hits = [f"{p.name}:{i}" for p in SOURCES
            for i, line in enumerate(p.read_text().splitlines(), 1) if "kclient" in line]
    assert not hits, f"kcore refers to kclient at {hits}"


def test_every_kcore_module_imports_without_kclient():
    code = ("import importlib, sys\n"
            f"for m in {MODULES!r}: importlib.import_module('kcore.' + m)\n"
            "bad = sorted(m for m in sys.modules if m == 'kclient' or m.startswith('kclient.'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=KCORE.parent)


@pytest.mark.parametrize("name", core_errors.__all__)
def test_client_errors_reexport_the_kcore_classes(name):
    assert getattr(client_errors, name) is getattr(core_errors, name)
    assert name in client_errors.__all__


def test_kcore_errors_keep_their_codes_and_bases():
    assert client_errors.for_code(2) is core_errors.CorruptRecordError
    assert client_errors.for_code(35) is core_errors.UnsupportedVersionError
    assert issubclass(core_errors.InvalidRecordLengthError, core_errors.InvalidLengthError)
    assert issubclass(core_errors.ConfigurationError, ValueError)
    assert issubclass(client_errors.ConcurrentAccessError, core_errors.IllegalStateError)
    assert str(core_errors.CrcMismatchError("bad")) == "[Error 2] CrcMismatchError: bad"
    assert str(core_errors.UnsupportedVersionError()) == (
        "[Error 35] UnsupportedVersionError: The version of API is not supported.")
    assert str(core_errors.ProtocolError()) == "ProtocolError"
    assert core_errors.KafkaConnectionError.retriable and core_errors.KafkaConnectionError.invalid_metadata


def test_client_schema_fits_the_codec_protocols():
    from kclient.protocol import messages as defs
    from kcore.messages import FieldSpec, MessageSpec

    def walk(fields):
        for f in fields:
            assert isinstance(f, FieldSpec), f
            walk(f.fields)

    every = list(defs.REQUESTS.values()) + list(defs.RESPONSES.values())
    assert every
    for m in every:
        assert isinstance(m, MessageSpec), m
        walk(m.fields)
    assert not isinstance(object(), MessageSpec)

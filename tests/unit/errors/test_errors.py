"""kclient.errors: the written-out broker error classes match their table, and codes map to them."""
import os
import subprocess
import sys

import pytest

import kcore.errors as core_errors
from kclient import errors
from repo_paths import REPO

ROOT = str(REPO)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_broker_errors  # noqa: E402


def test_generated_block_is_up_to_date():
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_broker_errors.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("row", gen_broker_errors._BROKER_ERRORS, ids=lambda r: r[1])
def test_each_code_has_its_class(row):
    code, name, retriable, invalid_md, desc = row
    cls = errors.for_code(code)
    assert cls is getattr(errors, gen_broker_errors.class_name(name))
    assert issubclass(cls, errors.BrokerResponseError)
    assert (cls.errno, cls.name, cls.retriable, cls.invalid_metadata, cls.description) == (
        code, name, retriable, invalid_md, desc)
    assert cls.__module__ == "kclient.errors" and cls.__name__ in errors.__all__


def test_codes_served_by_kcore_classes_and_unknown_codes():
    assert errors.for_code(0) is None
    assert errors.for_code(2) is core_errors.CorruptRecordError
    assert errors.for_code(35) is core_errors.UnsupportedVersionError
    assert errors.for_code(9999) is errors.UnknownBrokerError
    with pytest.raises(errors.UnknownBrokerError) as info:
        errors.raise_for_code(9999, "boom")
    assert info.value.errno == 9999
    with pytest.raises(errors.TopicAlreadyExistsError):
        errors.raise_for_code(36)
    errors.raise_for_code(0)

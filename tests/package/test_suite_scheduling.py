"""The suite's own xdist scheduling table (tests/support/scheduling.py) stays true to the files."""
from __future__ import annotations

import re

import scheduling
from repo_paths import REPO

FIXTURE_USE = {group: re.compile(rf"\b{group}\b") for group in scheduling.SHARED_BROKER_GROUPS}


def test_every_listed_file_exists():
    listed = [p for paths in scheduling.SHARED_BROKER_GROUPS.values() for p in paths]
    listed += [p for p in scheduling.WEIGHTS if p not in scheduling.SHARED_BROKER_GROUPS]
    missing = [p for p in listed if not (REPO / p).is_file()]
    assert not missing, f"scheduling.py names files that do not exist: {missing}"


def test_every_file_using_a_shared_broker_is_in_its_group():
    for group, pattern in FIXTURE_USE.items():
        users = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                 if pattern.search(p.read_text(encoding="utf-8"))}
        users.discard("tests/package/test_suite_scheduling.py")
        assert users == set(scheduling.SHARED_BROKER_GROUPS[group]), (
            f"files using the {group} fixture and the {group} group differ: "
            f"{sorted(users ^ set(scheduling.SHARED_BROKER_GROUPS[group]))}")


def test_units_are_handed_out_heaviest_first():
    assert scheduling.scope_of("tests/integration/testing/test_chaos.py::test_x[a]") == "kafka3"
    assert scheduling.scope_of("tests/unit/x/test_y.py::T::test_z") == "tests/unit/x/test_y.py"
    queue = ["tests/unit/a.py", "tests/package/test_wheel.py", "kafka3", "tests/unit/b.py"]
    order = []
    while queue:
        order.append(scheduling.heaviest(queue))
        queue.remove(order[-1])
    assert order == ["kafka3", "tests/package/test_wheel.py", "tests/unit/a.py", "tests/unit/b.py"]

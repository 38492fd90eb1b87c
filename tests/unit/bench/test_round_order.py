"""The benchmark's round orders: every round runs every driver once, the same command runs
the same orders, and no driver always runs right after the same neighbour (whose effect on
the broker would otherwise be charged to it in every round)."""
from __future__ import annotations

from collections import defaultdict

import pytest

from bench.runner import round_order

DRIVERS = ["raw-fetch", "kclient-records", "kclient-records-defaults", "kclient-columnar-defaults",
           "kclient-iter", "java", "confluent-tuned"]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8])
def test_every_round_runs_every_driver_once(n):
    drivers = DRIVERS[:n] if n <= len(DRIVERS) else DRIVERS + [f"extra-{i}" for i in range(n - len(DRIVERS))]
    for rep in range(3 * n):
        assert sorted(round_order(drivers, rep)) == sorted(drivers)


def test_the_same_round_gets_the_same_order():
    assert [round_order(DRIVERS, rep) for rep in range(9)] == [round_order(list(DRIVERS), rep) for rep in range(9)]


def test_the_callers_list_is_left_as_it_was():
    drivers = list(DRIVERS)
    for rep in range(9):
        round_order(drivers, rep)
    assert drivers == DRIVERS


@pytest.mark.parametrize("n", [3, 4, 7])
def test_within_one_round_more_than_drivers_every_driver_follows_two_different_neighbours(n):
    drivers = DRIVERS[:n]
    before: dict[str, set[str]] = defaultdict(set)
    for rep in range(n + 1):
        order = round_order(drivers, rep)
        for previous, driver in zip(order, order[1:]):
            before[driver].add(previous)
    assert set(before) == set(drivers)
    assert all(len(neighbours) >= 2 for neighbours in before.values()), dict(before)


@pytest.mark.parametrize("rep", range(8))
def test_no_driver_follows_the_same_neighbour_in_two_rounds_in_a_row(rep):
    def predecessors(order):
        return dict(zip(order[1:], order))
    this, following = predecessors(round_order(DRIVERS, rep)), predecessors(round_order(DRIVERS, rep + 1))
    assert not [d for d in this if following.get(d) == this[d]]


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_each_driver_leads_a_round_within_as_many_rounds_as_drivers(n):
    drivers = DRIVERS[:n]
    assert [round_order(drivers, rep)[0] for rep in range(n)] == drivers


def test_a_baseline_twin_runs_beside_its_driver_in_every_round():
    from bench.runner import baseline_drivers
    drivers = baseline_drivers(["raw-fetch", "kclient-records", "java"])
    for rep in range(6):
        order = round_order(drivers, rep)
        twin, own = order.index("kclient-records@baseline"), order.index("kclient-records")
        assert abs(twin - own) == 1 or {twin, own} == {0, len(order) - 1}, order

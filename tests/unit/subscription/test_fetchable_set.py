"""SubscriptionState.fetchable_set and has_all_fetch_positions, kept between changes, are at
every step what the assigned partitions' states give, whatever the changes: assignments, pauses,
resumes, seeks, resets, validations, revocations, leader epochs moving."""
from __future__ import annotations

import random

import pytest

from kclient.structs import TopicPartition
from kclient.subscription.state import FetchPosition, SubscriptionState

TPS = [TopicPartition(t, p) for t in ("a", "b") for p in range(3)]


def _step(rng: random.Random, s: SubscriptionState) -> None:
    assigned = list(s.assigned_partitions())
    op = rng.randrange(10)
    if op == 0 or not assigned:
        s.assign_from_user(rng.sample(TPS, rng.randrange(1, len(TPS) + 1)))
        return
    tp = rng.choice(assigned)
    if op == 1:
        s.pause(tp)
    elif op == 2:
        s.resume(tp)
    elif op == 3:
        s.seek(tp, rng.randrange(100))
    elif op == 4:
        s.request_offset_reset([tp])
    elif op == 5 and s.valid_position(tp) is not None:
        s.request_validation_at(tp, s.valid_position(tp))
    elif op == 6:
        s.complete_validation(tp)
    elif op == 7:
        s.mark_pending_revocation([tp])
    elif op == 8:
        s.seek_validated(tp, FetchPosition(rng.randrange(100), 1, 1))
        s.maybe_validate_for_leader_epochs({tp: 2})
    else:
        s.reset_initializing_positions()


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_fetchable_set_follows_every_change(seed):
    rng = random.Random(seed)
    s = SubscriptionState("earliest")
    for _ in range(400):
        _step(rng, s)
        for _ in range(rng.randrange(1, 3)):      # read once or more between changes
            assert s.fetchable_set() == {tp for tp in s.assigned_partitions() if s.is_fetchable(tp)}
            assert s.has_all_fetch_positions() == all(s.has_valid_position(tp) for tp in s.assigned_partitions())

"""SubscriptionState: one test per rule (exclusivity, patterns, assignment, positions, resets)."""
import re
import threading

import pytest

from kclient.errors import (
    ConfigurationError,
    IllegalArgumentError,
    IllegalStateError,
    NoOffsetForPartitionError,
)
from kclient.subscription.listener import ConsumerRebalanceListener, invoke_partitions_lost
from kclient.structs import OffsetAndMetadata, TopicPartition as TP
from kclient.subscription.state import (
    FetchPosition,
    FetchState,
    OffsetResetStrategy,
    SubscriptionState,
    SubscriptionType,
    parse_reset_strategy,
)

T0, T1, U0 = TP("t", 0), TP("t", 1), TP("u", 0)


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.calls = []

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", set(assigned)))


@pytest.fixture
def s():
    return SubscriptionState("earliest")


def subscribed(*partitions, topics=("t", "u")):
    state = SubscriptionState("earliest")
    state.subscribe(list(topics))
    state.assign_from_subscribed(list(partitions))
    return state


# --------------------------------------------------------------------------- exclusivity
@pytest.mark.parametrize(
    "first, second",
    [
        (lambda s: s.subscribe(["t"]), lambda s: s.assign_from_user([T0])),
        (lambda s: s.subscribe(["t"]), lambda s: s.subscribe_pattern("t.*")),
        (lambda s: s.subscribe_pattern("t.*"), lambda s: s.subscribe(["t"])),
        (lambda s: s.subscribe_pattern("t.*"), lambda s: s.assign_from_user([T0])),
        (lambda s: s.assign_from_user([T0]), lambda s: s.subscribe(["t"])),
        (lambda s: s.assign_from_user([T0]), lambda s: s.subscribe_pattern("t.*")),
    ],
)
def test_subscription_kinds_are_mutually_exclusive(s, first, second):
    first(s)
    kind = s.subscription_type
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        second(s)
    assert s.subscription_type is kind  # the failed call changed nothing


def test_unsubscribe_allows_switching(s):
    listener = Recorder()
    s.subscribe(["t"], listener)
    s.unsubscribe()
    assert s.subscription_type is SubscriptionType.NONE and s.rebalance_listener is None
    assert s.assign_from_user([T0]) is True
    assert s.subscription_type is SubscriptionType.USER_ASSIGNED


def test_same_kind_may_be_repeated_and_reports_change(s):
    assert s.subscribe(["t"]) is True
    assert s.subscribe(["t"]) is False
    assert s.subscribe(["t", "u"]) is True
    assert s.subscription == {"t", "u"}


def test_subscribe_validates_topics_and_listener(s):
    with pytest.raises(TypeError):
        s.subscribe("t")  # a bare string is a common mistake
    with pytest.raises(IllegalArgumentError):
        s.subscribe(["bad topic!"])
    with pytest.raises(IllegalArgumentError):
        s.subscribe([".."])
    with pytest.raises(IllegalArgumentError):
        s.subscribe(["x" * 250])
    with pytest.raises(TypeError):
        s.subscribe([None])
    with pytest.raises(TypeError, match="listener"):
        s.subscribe(["t"], listener=object())
    assert s.subscription_type is SubscriptionType.NONE


def test_invalid_pattern_is_an_argument_error(s):
    with pytest.raises(IllegalArgumentError):
        s.subscribe_pattern("(")
    with pytest.raises(TypeError):
        s.subscribe_pattern(42)


# --------------------------------------------------------------------------- patterns
def test_pattern_matches_whole_names_and_skips_internal_topics(s):
    s.subscribe_pattern(r"orders-.*|__consumer_offsets|__.*")
    topics = ["orders-1", "orders-2", "xorders-1", "orders", "__consumer_offsets", "__transaction_state", "__custom"]
    assert s.topics_matching_pattern(topics) == {"orders-1", "orders-2", "__custom"}
    # the metadata response may flag more internal topics
    assert s.topics_matching_pattern(topics, internal_topics={"__custom"}) == {"orders-1", "orders-2"}
    assert s.matches_subscription("orders-9")
    assert not s.matches_subscription("orders")
    assert not s.matches_subscription("__consumer_offsets")
    assert not s.matches_subscription("__custom", is_internal=True)


def test_internal_topics_match_when_not_excluded():
    s = SubscriptionState(exclude_internal_topics=False)
    s.subscribe_pattern(re.compile("__.*"))
    assert s.topics_matching_pattern(["__consumer_offsets", "t"]) == {"__consumer_offsets"}
    assert s.matches_subscription("__consumer_offsets", is_internal=True)


def test_subscribe_from_pattern_sets_topics_and_requires_pattern(s):
    with pytest.raises(IllegalStateError):
        s.subscribe_from_pattern({"t"})
    s.subscribe_pattern("t|u")
    assert s.subscription == frozenset()
    assert s.subscribe_from_pattern(s.topics_matching_pattern(["t", "u", "v"])) is True
    assert s.subscription == {"t", "u"}
    assert s.subscribe_from_pattern({"u", "t"}) is False
    assert s.needs_metadata("t") and not s.needs_metadata("v")


def test_matches_subscription_per_kind(s):
    assert not s.matches_subscription("t")
    s.subscribe(["t"])
    assert s.matches_subscription("t") and not s.matches_subscription("u")
    s.unsubscribe()
    s.assign_from_user([U0])
    assert s.matches_subscription("u") and not s.matches_subscription("t")


# --------------------------------------------------------------------------- group subscription
def test_leader_group_subscription_widens_metadata_topics(s):
    with pytest.raises(IllegalStateError):
        s.group_subscribe({"t"})
    s.subscribe(["t"])
    assert s.group_subscribe({"t"}) is False
    assert s.group_subscribe({"t", "v"}) is True
    assert s.group_subscription == {"t", "v"}
    assert s.metadata_topics() == {"t", "v"}
    assert s.needs_metadata("v")
    s.reset_group_subscription()
    assert s.metadata_topics() == {"t"}


def test_group_subscribe_rejected_under_manual_assignment(s):
    s.assign_from_user([T0])
    with pytest.raises(IllegalStateError):
        s.group_subscribe({"t"})


# --------------------------------------------------------------------------- assignment
def test_assign_from_user_sets_topics_and_reports_change(s):
    assert s.assign_from_user([T0, U0]) is True
    assert s.assign_from_user([U0, T0]) is False
    assert s.assigned_partitions() == {T0, U0}
    assert s.subscription == frozenset()  # manual assignment is not a subscription
    assert s.metadata_topics() == {"t", "u"}
    with pytest.raises(IllegalArgumentError):
        s.assign_from_user([TP("t", -1)])
    with pytest.raises(TypeError):
        s.assign_from_user(T0)  # a single partition, not a collection


def test_assign_from_subscribed_validates_before_changing_anything():
    s = subscribed(T0)
    with pytest.raises(IllegalArgumentError, match="not in the subscription"):
        s.assign_from_subscribed([T1, TP("other", 0)])
    assert s.assigned_partitions() == {T0}
    assert s.check_assignment_matched_subscription([TP("other", 0)]) is False
    assert s.check_assignment_matched_subscription([T1, U0]) is True


def test_assign_from_subscribed_with_pattern_checks_the_pattern(s):
    s.subscribe_pattern("t")
    s.assign_from_subscribed([T0])  # matches the pattern even before subscribe_from_pattern
    with pytest.raises(IllegalArgumentError):
        s.assign_from_subscribed([U0])


def test_assign_from_subscribed_needs_a_group_subscription(s):
    with pytest.raises(IllegalStateError):
        s.assign_from_subscribed([T0])
    s.assign_from_user([T0])
    with pytest.raises(IllegalStateError):
        s.assign_from_subscribed([T0])


def test_retained_partitions_keep_position_and_pause_new_ones_start_fresh():
    s = subscribed(T0, T1)
    s.seek(T0, 10)
    s.pause(T0)
    s.seek(T1, 20)
    before = s.assignment_id
    s.assign_from_subscribed([T0, U0])
    assert s.assignment_id == before + 1
    assert s.position(T0) == FetchPosition(10) and s.is_paused(T0)
    assert s.fetch_state(U0) is FetchState.INITIALIZING
    assert not s.is_assigned(T1)
    s.assign_from_subscribed([T1])
    assert s.fetch_state(T1) is FetchState.INITIALIZING  # state is not kept once revoked


def test_unsubscribe_clears_assignment_and_bumps_assignment_id():
    s = subscribed(T0)
    before = s.assignment_id
    s.unsubscribe()
    assert s.assigned_partitions() == set() and s.assignment_id == before + 1


# --------------------------------------------------------------------------- positions
def test_seek_makes_partition_fetchable_and_pause_resume(s):
    s.assign_from_user([T0, T1, U0])
    assert s.fetchable_partitions() == []
    assert not s.has_all_fetch_positions()
    assert s.missing_fetch_positions() == {T0, T1, U0}
    s.seek(T0, 5)
    s.seek(T1, 0)
    assert s.fetchable_partitions() == [T0, T1]
    s.pause(T1)
    assert s.fetchable_partitions() == [T0] and s.paused_partitions() == {T1}
    assert s.fetchable_partitions(lambda tp: tp != T0) == []
    s.resume(T1)
    assert s.fetchable_partitions() == [T0, T1]
    s.seek(U0, 1)
    assert s.has_all_fetch_positions() and s.missing_fetch_positions() == set()


def test_operations_on_unassigned_partitions_raise(s):
    s.assign_from_user([T0])
    for op in (lambda: s.seek(U0, 1), lambda: s.pause(U0), lambda: s.resume(U0), lambda: s.position(U0),
               lambda: s.request_offset_reset(U0)):
        with pytest.raises(IllegalStateError, match="No current assignment"):
            op()
    assert not s.is_paused(U0) and not s.is_fetchable(U0) and not s.has_valid_position(U0)


def test_seek_rejects_bad_offsets(s):
    s.assign_from_user([T0])
    for bad in (-1, "5", None, True):
        with pytest.raises(IllegalArgumentError):
            s.seek(T0, bad)


def test_set_position_needs_a_valid_position(s):
    s.assign_from_user([T0])
    with pytest.raises(IllegalStateError):
        s.set_position(T0, FetchPosition(3))
    s.seek(T0, 1)
    s.set_position(T0, FetchPosition(3, offset_epoch=2))
    assert s.position(T0) == FetchPosition(3, 2)


def test_all_consumed_reports_valid_positions_as_offsets_to_commit(s):
    s.assign_from_user([T0, T1, U0])
    s.seek_validated(T0, FetchPosition(7, offset_epoch=3))
    s.seek(T1, 9)
    assert s.all_consumed() == {T0: OffsetAndMetadata(7, "", 3), T1: OffsetAndMetadata(9, "", -1)}


def test_move_partition_to_end_rotates_fetch_order(s):
    s.assign_from_user([T0, T1, U0])
    for tp in (T0, T1, U0):
        s.seek(tp, 0)
    s.move_partition_to_end(T0)
    assert s.fetchable_partitions() == [T1, U0, T0]
    s.move_partition_to_end(TP("nope", 0))  # ignored


def test_pending_revocation_stops_fetching():
    s = subscribed(T0, T1)
    s.seek(T0, 0)
    s.seek(T1, 0)
    s.mark_pending_revocation({T1})
    assert s.fetchable_partitions() == [T0]
    assert s.all_consumed().keys() == {T0, T1}  # still committable


# --------------------------------------------------------------------------- resets
def test_reset_flow_with_default_strategy(s):
    s.assign_from_user([T0, T1])
    s.reset_initializing_positions()
    assert s.partitions_needing_reset(0) == {T0, T1}
    assert s.reset_strategy(T0) is OffsetResetStrategy.EARLIEST and s.is_offset_reset_needed(T0)
    s.set_next_allowed_retry([T0, T1], 1000)
    assert s.partitions_needing_reset(999) == set()
    assert s.partitions_needing_reset(1000) == {T0, T1}
    assert s.maybe_seek_unvalidated(T0, FetchPosition(42), OffsetResetStrategy.EARLIEST) is True
    assert s.position(T0) == FetchPosition(42) and s.reset_strategy(T0) is None
    assert s.fetchable_partitions() == [T0]


def test_stale_reset_results_are_dropped(s):
    s.assign_from_user([T0, T1])
    s.request_offset_reset(T0, "earliest")
    s.request_offset_reset(T0, "latest")  # user changed their mind while ListOffsets was in flight
    assert s.maybe_seek_unvalidated(T0, FetchPosition(0), OffsetResetStrategy.EARLIEST) is False
    s.seek(T1, 5)
    assert s.maybe_seek_unvalidated(T1, FetchPosition(0), OffsetResetStrategy.LATEST) is False  # not awaiting
    assert s.maybe_seek_unvalidated(U0, FetchPosition(0), OffsetResetStrategy.LATEST) is False  # not assigned
    assert s.position(T1) == FetchPosition(5)


def test_reset_with_strategy_none_raises_no_offset():
    s = SubscriptionState("none")
    s.assign_from_user([T0, T1])
    s.seek(T1, 3)
    assert not s.has_default_offset_reset_policy()
    with pytest.raises(NoOffsetForPartitionError) as info:
        s.reset_initializing_positions()
    assert info.value.partitions == {T0}


def test_reset_initializing_positions_respects_include_filter(s):
    s.assign_from_user([T0, T1])
    s.reset_initializing_positions(lambda tp: tp == T1)
    assert s.partitions_needing_reset(0) == {T1}
    assert s.initializing_partitions() == {T0}


def test_request_failed_backs_off_and_ignores_revoked(s):
    s.assign_from_user([T0])
    s.request_offset_reset([T0])
    s.request_failed([T0, U0], 500)
    assert s.partitions_needing_reset(100) == set()
    assert s.partitions_needing_reset(500) == {T0}


def test_request_offset_reset_if_partition_assigned(s):
    s.assign_from_user([T0])
    s.seek(T0, 4)
    s.request_offset_reset_if_partition_assigned(T0)
    s.request_offset_reset_if_partition_assigned(U0)  # ignored
    assert s.is_offset_reset_needed(T0) and not s.has_valid_position(T0)
    assert s.all_consumed() == {}


@pytest.mark.parametrize("value, expected", [
    ("earliest", OffsetResetStrategy.EARLIEST), ("LATEST", OffsetResetStrategy.LATEST),
    ("none", OffsetResetStrategy.NONE), ("smallest", OffsetResetStrategy.EARLIEST),
    ("largest", OffsetResetStrategy.LATEST),
])
def test_reset_strategy_names(value, expected):
    assert parse_reset_strategy(value) is expected


@pytest.mark.parametrize("bad", ["sometimes", None, 3])
def test_bad_reset_strategy_names_the_setting(bad):
    with pytest.raises(ConfigurationError, match="auto.offset.reset"):
        SubscriptionState(bad)


# --------------------------------------------------------------------------- validation states
def test_validation_state_machine(s):
    s.assign_from_user([T0])
    s.seek_unvalidated(T0, FetchPosition(10, offset_epoch=4, current_leader_epoch=5))
    assert s.awaiting_validation(T0) and not s.is_fetchable(T0)
    assert s.partitions_needing_validation(0) == {T0}
    assert s.all_consumed() == {}
    s.complete_validation(T0)
    assert s.is_fetchable(T0) and s.partitions_needing_validation(0) == set()
    # Without epochs there is nothing to validate against.
    s.seek_unvalidated(T0, FetchPosition(11))
    assert s.fetch_state(T0) is FetchState.FETCHING


def test_validation_request_does_not_override_a_pending_reset(s):
    s.assign_from_user([T0])
    s.request_offset_reset(T0, "latest")
    s.request_position_validation(T0)  # AWAIT_RESET -> AWAIT_VALIDATION is not a valid transition
    assert s.fetch_state(T0) is FetchState.AWAIT_RESET


def test_validation_without_a_position_is_an_error(s):
    s.assign_from_user([T0])
    with pytest.raises(IllegalStateError, match="needs a position"):
        s.request_position_validation(T0)


# --------------------------------------------------------------------------- watermarks
def test_watermarks_lag_and_lead(s):
    s.assign_from_user([T0])
    assert s.partition_lag(T0) is None
    s.seek(T0, 40)
    assert s.update_high_watermark(T0, 100) and s.update_last_stable_offset(T0, 90)
    assert s.update_log_start_offset(T0, 15)
    assert not s.update_high_watermark(U0, 5)  # late response for a revoked partition
    assert s.partition_lag(T0) == 60
    assert s.partition_lag(T0, "read_committed") == 50
    assert s.partition_lead(T0) == 25
    assert (s.high_watermark(T0), s.last_stable_offset(T0), s.log_start_offset(T0)) == (100, 90, 15)


def test_a_fetch_answers_offsets_under_one_call(s):
    s.assign_from_user([T0, T1])
    s.seek(T0, 40)
    s.update_high_watermark(T1, 7)
    s.record_fetched_offsets([(T0, 100, -1, 15), (T1, -1, 5, -1), (U0, 9, 9, 9)], returned=[T0, U0])
    assert (s.high_watermark(T0), s.last_stable_offset(T0), s.log_start_offset(T0)) == (100, None, 15)
    assert (s.high_watermark(T1), s.last_stable_offset(T1), s.log_start_offset(T1)) == (7, 5, None)
    assert not s.is_assigned(U0)                       # a late answer assigns nothing
    assert s.assigned_partitions_list() == [T1, T0]    # the partition that returned data goes last
    assert s.log_start_offsets([T0, T1, U0]) == [15, None, None]


def test_positions_read_and_written_for_many_partitions_at_once(s):
    s.assign_from_user([T0, T1])
    s.seek(T0, 40)
    assert s.valid_positions([T0, T1, U0]) == [FetchPosition(40), None, None]   # T1: no position yet
    s.set_positions([(T0, FetchPosition(45, 3)), (T1, FetchPosition(9))])     # T1 not valid: left alone
    assert s.position(T0) == FetchPosition(45, 3) and s.position(T1) is None
    s.seek_validated(T0, FetchPosition(50, 3, 4))
    s.advance_positions([(T0, FetchPosition(60, 5)), (T0, FetchPosition(55, 5))])  # never backwards
    assert s.position(T0) == FetchPosition(60, 5, 4)   # the leader epoch it was validated under stays


# --------------------------------------------------------------------------- listener
def test_listener_is_kept_and_lost_defaults_to_revoked(s):
    listener = Recorder()
    s.subscribe(["t"], listener)
    assert s.rebalance_listener is listener
    listener.on_partitions_lost({T0})
    assert listener.calls == [("revoked", {T0})]

    class KafkaPythonStyle:  # no on_partitions_lost: accepted, and lost falls back to revoked
        def __init__(self):
            self.revoked = None

        def on_partitions_revoked(self, revoked):
            self.revoked = set(revoked)

        def on_partitions_assigned(self, assigned):
            pass

    other = KafkaPythonStyle()
    s.subscribe(["t"], other)
    invoke_partitions_lost(other, [T1])
    assert other.revoked == {T1}


def test_listener_abstract_methods_are_required():
    class Half(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

    with pytest.raises(TypeError):
        Half()


def test_concurrent_reads_see_whole_assignments():
    s = subscribed(T0, topics=("t",))
    parts_a = [TP("t", i) for i in range(0, 50)]
    parts_b = [TP("t", i) for i in range(50, 100)]
    errors = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            seen = s.assigned_partitions()
            if seen and not (seen == set(parts_a) or seen == set(parts_b) or seen == {T0}):
                errors.append(seen)

    th = threading.Thread(target=reader)
    th.start()
    try:
        for i in range(300):
            s.assign_from_subscribed(parts_a if i % 2 else parts_b)
    finally:
        stop.set()
        th.join(timeout=10)
    assert not th.is_alive() and errors == []


def test_fetch_states_are_distinct_with_kafkas_position_rules():
    assert len(FetchState) == 4
    assert [st.has_valid_position for st in FetchState] == [False, True, False, False]
    assert [st.requires_position for st in FetchState] == [False, True, False, True]


def test_structs_have_kafka_python_shapes():
    from kclient.structs import ConsumerRecord, OffsetAndTimestamp

    assert TP._fields == ("topic", "partition")
    assert OffsetAndMetadata._fields == ("offset", "metadata", "leader_epoch")
    assert OffsetAndMetadata(5) == (5, "", -1)
    assert OffsetAndTimestamp._fields == ("offset", "timestamp", "leader_epoch")
    assert ConsumerRecord._fields == (
        "topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type", "key", "value",
        "headers", "checksum", "serialized_key_size", "serialized_value_size", "serialized_header_size",
    )
    assert TP("t", 1) == ("t", 1) and hash(TP("t", 1)) == hash(("t", 1))


# --------------------------------------------------------------------------- fetcher fast paths
def test_advance_position_moves_forward_only_from_a_valid_position(s):
    s.assign_from_user([T0, T1])
    assert s.advance_position(T0, FetchPosition(10)) is False      # no position yet
    assert s.advance_position(U0, FetchPosition(10)) is False      # not assigned
    s.seek(T0, 5)
    assert s.advance_position(T0, FetchPosition(9, offset_epoch=2)) is True
    assert s.position(T0) == FetchPosition(9, 2)
    assert s.advance_position(T0, FetchPosition(7)) is False       # never backwards
    assert s.position(T0) == FetchPosition(9, 2)
    s.request_offset_reset(T0)                                     # no longer FETCHING
    assert s.advance_position(T0, FetchPosition(20)) is False


def test_fetch_candidates_lists_fetchable_partitions_with_their_end_offsets(s):
    s.assign_from_user([T0, T1, U0])
    assert s.fetch_candidates() == []
    s.seek(T0, 5)
    s.seek(T1, 0)
    s.seek(U0, 3)
    s.update_high_watermark(T0, 100)
    s.update_last_stable_offset(T0, 90)
    s.pause(U0)
    assert s.fetch_candidates() == [(T0, FetchPosition(5), 100), (T1, FetchPosition(0), None)]
    assert s.fetch_candidates(read_committed=True) == [(T0, FetchPosition(5), 90), (T1, FetchPosition(0), None)]
    # Same partitions, same order as fetchable_partitions(): the fetcher relies on it.
    assert [c[0] for c in s.fetch_candidates()] == s.fetchable_partitions()

"""``auto.offset.reset=by_duration:<ISO-8601 duration>`` (KIP-1106), one layer at a time: the
duration parser, the consumer's config check, and OffsetFetcher's two ListOffsets requests
against a scripted client (the broker test is integration/consumer/test_reset_by_duration.py)."""
from __future__ import annotations

import pytest

from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.config.durations import by_duration_ms, iso8601_duration_ms
from kclient.consumer.offset_fetcher import OffsetFetcher
from kclient.subscription.state import FetchState, OffsetResetStrategy, SubscriptionState
from kclient.errors import ConfigurationError, TopicAuthorizationFailedError

from test_fetcher import T, TP0, TP1, AnsweringClient, make_metadata

HOUR = 3_600_000


@pytest.mark.parametrize("text, ms", [
    ("PT1H", HOUR), ("P1DT2H", 26 * HOUR), ("P2D", 48 * HOUR), ("PT90M", 90 * 60_000), ("PT0S", 0),
    ("PT1.5S", 1500), ("PT0,25S", 250), ("PT0.0009S", 0), ("pt1h30m", 90 * 60_000), ("PT1H-30M", 30 * 60_000),
    ("-PT-1H", HOUR), ("P1DT1H1M1.001S", 24 * HOUR + HOUR + 61_001), ("+PT5S", 5000), ("PT-2S", -2000),
    ("-PT1.5S", -1500), ("PT-0.5S", -500),
])
def test_durations_read_as_javas_duration_parse(text, ms):
    assert iso8601_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1", "P1H", "PT1D", "P1W", "P1Y", "P1M", "PT1.1234567891S",
                                  "P1DT", "PTH", "xPT1H", "P T1H", "PT1HX"])
def test_malformed_durations_are_refused(text):
    with pytest.raises(ValueError, match="not an ISO-8601 duration"):
        iso8601_duration_ms(text)


def test_by_duration_values():
    assert by_duration_ms("earliest") is None and by_duration_ms("latest") is None
    assert by_duration_ms("by_duration:PT1H") == HOUR
    assert by_duration_ms("  BY_DURATION:pt2h ") == 2 * HOUR
    assert by_duration_ms("by_duration:PT0S") == 0


@pytest.mark.parametrize("value, message", [
    ("by_duration:PT-1H", "negative duration"),
    ("by_duration:-PT1M", "negative duration"),
    ("by_duration:PT-0.0001S", "negative duration"),     # below a millisecond, still negative
    ("by_duration:", "names no duration"),
    ("by_duration", "names no duration"),
    ("by_durationPT1H", "names no duration"),
    ("by_duration:1 hour", "not an ISO-8601 duration"),
    ("by_duration:P1W", "years, months and weeks are not accepted"),
])
def test_the_consumer_config_refuses_bad_durations_naming_the_setting(value, message):
    with pytest.raises(ConfigurationError, match=message) as err:
        ConsumerConfig({"bootstrap.servers": "h:9092", "auto.offset.reset": value})
    assert "'auto.offset.reset'" in str(err.value)


def test_the_consumer_config_keeps_a_valid_duration():
    for value, kept in (("by_duration:PT1H", "by_duration:PT1H"), ("By_Duration: P1DT2H ", "by_duration:P1DT2H"),
                        ("EARLIEST", "earliest"), ("largest", "largest")):
        assert ConsumerConfig({"bootstrap.servers": "h:9092", "auto.offset.reset": value})["auto.offset.reset"] == kept
    with pytest.raises(ConfigurationError, match="'auto.offset.reset' must be one of"):
        ConsumerConfig({"bootstrap.servers": "h:9092", "auto.offset.reset": "middle"})


def test_subscription_state_takes_the_strategy_and_its_duration():
    subs = SubscriptionState("by_duration:P1DT2H")
    assert subs.default_reset_strategy is OffsetResetStrategy.BY_DURATION and subs.reset_duration_ms == 26 * HOUR
    assert subs.has_default_offset_reset_policy()
    assert SubscriptionState("earliest").reset_duration_ms is None


# ---------------------------------------------------------------------- OffsetFetcher (scripted client)
def scripted(ends: dict[int, int], by_time: dict[int, int]):
    """ListOffsets answers: the end offset for timestamp -1, else by_time's offset (-1: no
    record that recent)."""
    def answer(body):
        parts = []
        for t in body["topics"]:
            for p in t["partitions"]:
                i = p["partition_index"]
                offset = ends[i] if p["timestamp"] == -1 else by_time[i]
                parts.append({"partition_index": i, "error_code": 0, "timestamp": -1, "offset": offset,
                              "leader_epoch": 5})
        return {"throttle_time_ms": 0, "topics": [{"name": T, "partitions": parts}]}
    return answer


def sent_timestamps(client) -> list[dict[int, int]]:
    return [{p["partition_index"]: p["timestamp"] for t in body["topics"] for p in t["partitions"]}
            for _node, body in client.bodies]


def test_a_duration_reset_asks_for_the_end_then_for_now_minus_the_duration():
    clock = FakeClock()
    client = AnsweringClient(make_metadata(), clock, scripted(ends={0: 50, 1: 80}, by_time={0: 17, 1: -1}))
    subs = SubscriptionState("by_duration:PT1H")
    reset = []
    fetcher = OffsetFetcher(client, subs, clock=clock, on_position_reset=reset.append)
    subs.assign_from_user([TP0, TP1])
    subs.reset_initializing_positions()
    fetcher.reset_positions_if_needed()
    assert sent_timestamps(client) == [{0: -1, 1: -1}, {0: clock.wall_ms() - HOUR, 1: clock.wall_ms() - HOUR}]
    # A record that recent: its offset. None that recent: the end as it was before the lookup.
    assert subs.position(TP0).offset == 17 and subs.position(TP1).offset == 80
    assert subs.position(TP0).current_leader_epoch == 5
    assert {subs.fetch_state(tp) for tp in (TP0, TP1)} == {FetchState.FETCHING}
    assert sorted(reset) == [TP0, TP1]


def test_seeks_to_the_beginning_or_end_keep_their_single_request_next_to_a_duration_reset():
    clock = FakeClock()
    client = AnsweringClient(make_metadata(), clock, scripted(ends={0: 50, 1: 80}, by_time={1: 60}))
    subs = SubscriptionState("by_duration:PT10M")
    fetcher = OffsetFetcher(client, subs, clock=clock)
    subs.assign_from_user([TP0, TP1])
    subs.request_offset_reset([TP0], "latest")
    subs.request_offset_reset([TP1])
    fetcher.reset_positions_if_needed()
    assert sent_timestamps(client) == [{0: -1}, {1: -1}, {1: clock.wall_ms() - 600_000}]
    assert subs.position(TP0).offset == 50 and subs.position(TP1).offset == 60


def test_an_error_on_either_request_is_retried_or_raised_as_for_other_resets():
    clock = FakeClock()
    md = make_metadata()
    calls = []

    def failing_end_once(body):
        calls.append(body)
        if len(calls) == 1:    # NOT_LEADER_OR_FOLLOWER on the end offset
            return {"throttle_time_ms": 0, "topics": [{"name": T, "partitions": [
                {"partition_index": 0, "error_code": 6, "timestamp": -1, "offset": -1, "leader_epoch": -1}]}]}
        return scripted(ends={0: 9}, by_time={0: 4})(body)

    client = AnsweringClient(md, clock, failing_end_once)
    subs = SubscriptionState("by_duration:PT1H")
    fetcher = OffsetFetcher(client, subs, clock=clock)
    subs.assign_from_user([TP0])
    subs.reset_initializing_positions()
    fetcher.reset_positions_if_needed()
    assert len(calls) == 1 and subs.fetch_state(TP0) is FetchState.AWAIT_RESET and md.update_requested()
    clock.advance(100)
    fetcher.reset_positions_if_needed()
    assert len(calls) == 3 and subs.position(TP0).offset == 4

    def denied(body):
        if body["topics"][0]["partitions"][0]["timestamp"] == -1:
            return scripted(ends={0: 9}, by_time={})(body)
        return {"throttle_time_ms": 0, "topics": [{"name": T, "partitions": [
            {"partition_index": 0, "error_code": 29, "timestamp": -1, "offset": -1, "leader_epoch": -1}]}]}

    client = AnsweringClient(md, clock, denied)
    subs = SubscriptionState("by_duration:PT1H")
    fetcher = OffsetFetcher(client, subs, clock=clock)
    subs.assign_from_user([TP0])
    subs.reset_initializing_positions()
    fetcher.reset_positions_if_needed()
    with pytest.raises(TopicAuthorizationFailedError):
        fetcher.reset_positions_if_needed()

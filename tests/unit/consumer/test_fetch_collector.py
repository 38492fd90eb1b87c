"""FetchCollector unit tests: both drains (per record and columnar) meet an answer's error the
same way, and the fetch components take only their typed config. Scripted answers and a fake
clock (test_fetcher's helpers); the subscriptions, metadata and record decoder are real."""
from __future__ import annotations

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetcher import Fetcher
from kclient.subscription.state import SubscriptionState

from test_fetcher import TP0, TP1, ScriptedClient, batch, fetch_response, make_metadata, partition_data, requested


@pytest.fixture(params=["records", "columnar"])
def kind(request) -> str:
    return request.param


def make():
    client = ScriptedClient(make_metadata())
    subs = SubscriptionState("earliest")
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig()), clock=FakeClock())
    subs.assign_from_user([TP0, TP1])
    subs.seek(TP0, 0)
    subs.seek(TP1, 0)
    return client, subs, fetcher


def drain(fetcher: Fetcher, kind: str) -> dict:
    """{tp: [offset, ...]} of one poll, through the per-record or the columnar drain."""
    if kind == "records":
        records, _ = fetcher.fetched_records()
        return {tp: [r.offset for r in recs] for tp, recs in records.items()}
    columns, _ = fetcher.fetched_columnar()
    return {tp: list(cols.offsets) for tp, cols in columns.items()}


def answer(client: ScriptedClient, tp1_data: dict) -> None:
    """One answer: five records for TP0, then ``tp1_data`` for TP1."""
    (req,) = client.take()
    assert set(requested(req)) == {TP0, TP1}
    req.future.complete(fetch_response([partition_data(0, batch(0, 5)), tp1_data]))


def test_corrupt_data_after_records_raises_on_the_next_poll_and_is_fetched_again(kind):
    client, subs, fetcher = make()
    fetcher.send_fetches()
    data = bytearray(batch(0, 5))
    data[-3] ^= 0xFF
    answer(client, partition_data(1, bytes(data)))
    assert drain(fetcher, kind) == {TP0: [0, 1, 2, 3, 4]}      # what was taken comes first
    with pytest.raises(Errors.CorruptRecordError, match=r"partition=1\) at offset 0: .*CRC"):
        drain(fetcher, kind)
    assert subs.position(TP1).offset == 0
    assert drain(fetcher, kind) == {}                          # raised once, then released
    fetcher.send_fetches()
    assert requested(client.take()[0]) == {TP0: 5, TP1: 0}    # from the position, not the chain end


def test_an_error_in_the_answer_after_records_raises_on_the_next_poll(kind):
    client, subs, fetcher = make()
    fetcher.send_fetches()
    answer(client, partition_data(1, None, error=29))           # TOPIC_AUTHORIZATION_FAILED
    assert drain(fetcher, kind) == {TP0: [0, 1, 2, 3, 4]}
    with pytest.raises(Errors.TopicAuthorizationFailedError) as info:
        drain(fetcher, kind)
    assert info.value.unauthorized_topics == {"topic-a"}
    assert subs.position(TP1).offset == 0
    assert drain(fetcher, kind) == {}


@pytest.mark.parametrize("config", [ConsumerConfig(), {"fetch.max.bytes": 1000}])
def test_the_fetcher_takes_only_a_fetch_config(config):
    with pytest.raises(TypeError, match="FetchConfig"):
        Fetcher(ScriptedClient(make_metadata()), SubscriptionState(), config)


def test_fetch_config_of_checks_a_mapping_and_passes_a_fetch_config_through():
    fc = FetchConfig.of({"fetch.max.bytes": 1000, "isolation.level": "read_committed"})
    assert (fc.max_bytes, fc.isolation_level, fc.isolation) == (1000, "read_committed", 1)
    assert FetchConfig.of(fc) is fc
    with pytest.raises(Errors.ConfigurationError):
        FetchConfig.of({"fetch.max.bytes": -1})

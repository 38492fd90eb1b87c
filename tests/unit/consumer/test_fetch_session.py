"""Incremental fetch sessions (KIP-227): FetchSessionHandler on its own, the Fetch bodies the
Fetcher puts on the wire across a session's life, and sessions against real brokers (Apache
Kafka keeps them and checks every epoch; the mock cluster keeps none)."""
from __future__ import annotations

import time

import pytest

from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.fetch_session import (FINAL_EPOCH, INITIAL_EPOCH, FetchPartition, FetchSessionHandler,
                                            next_epoch)
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetcher import Fetcher
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.subscription.state import SubscriptionState
from kclient import errors as Errors
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition

from test_fetcher import T, TID, TP0, TP1, TP2, ScriptedClient, batch, fetch_response, make_metadata, \
    partition_data

A, B, C = (TopicPartition("t", p) for p in range(3))


def fp(offset: int, epoch: int = 5) -> FetchPartition:
    return FetchPartition(offset, epoch, -1, 1000)


# ---------------------------------------------------------------------- the handler alone
def test_a_session_opens_then_lists_only_changes_and_forgotten_partitions():
    h = FetchSessionHandler(1)
    d = h.build({A: fp(0), B: fp(0)}, 12)
    assert (d.session_id, d.session_epoch, d.is_full) == (0, INITIAL_EPOCH, True)
    assert d.to_send == {A: fp(0), B: fp(0)} and d.forgotten == []
    assert h.handle_response(0, 77)
    assert (h.session_id, h.epoch) == (77, 1) and h.sessions_created == 1
    d = h.build({A: fp(10), B: fp(0), C: fp(3)}, 12)          # A moved on, C is new
    assert (d.session_id, d.session_epoch, d.is_full) == (77, 1, False)
    assert d.to_send == {A: fp(10), C: fp(3)} and d.forgotten == []
    assert set(d.session) == {A, B, C}
    assert h.handle_response(0, 77)
    d = h.build({A: fp(10), C: fp(3, epoch=6)}, 12)           # B dropped, C's leader epoch moved
    assert (d.session_epoch, d.to_send, d.forgotten) == (2, {C: fp(3, epoch=6)}, [B])
    assert h.handle_response(0, 77)
    assert h.partitions == {A: fp(10), C: fp(3, epoch=6)} and h.epoch == 3


@pytest.mark.parametrize("code", [70, 71, 106])
def test_a_session_error_starts_a_new_session(code):
    h = FetchSessionHandler(1)
    h.build({A: fp(0)}, 12)
    h.handle_response(0, 77)
    h.build({A: fp(5)}, 12)
    assert h.handle_response(code, 0) is False                  # nothing in it to use
    d = h.build({A: fp(5)}, 12)
    assert (d.session_id, d.session_epoch, d.to_send) == (0, INITIAL_EPOCH, {A: fp(5)})


def test_a_lost_answer_closes_the_session_with_its_id_and_opens_another():
    h = FetchSessionHandler(1)
    h.build({A: fp(0)}, 12)
    h.handle_response(0, 77)
    h.build({A: fp(5)}, 12)
    h.handle_error()                                            # connection lost
    d = h.build({A: fp(5)}, 12)
    assert (d.session_id, d.session_epoch, d.to_send) == (77, INITIAL_EPOCH, {A: fp(5)})
    h.handle_response(0, 78)
    assert (h.session_id, h.epoch, h.sessions_created) == (78, 1, 2)


def test_a_broker_without_sessions_gets_full_fetches():
    h = FetchSessionHandler(1)
    for offset in (0, 5, 9):
        d = h.build({A: fp(offset)}, 12)
        assert (d.session_id, d.session_epoch, d.to_send) == (0, INITIAL_EPOCH, {A: fp(offset)})
        assert h.handle_response(0, 0)                          # session id 0: none kept


@pytest.mark.parametrize("enabled, version", [(False, 12), (True, 6)])
def test_sessionless_when_disabled_or_before_fetch_v7(enabled, version):
    h = FetchSessionHandler(1, enabled=enabled)
    for offset in (0, 5):
        d = h.build({A: fp(offset), B: fp(1)}, version)
        assert (d.session_id, d.session_epoch, d.forgotten) == (0, FINAL_EPOCH, [])
        assert d.to_send == {A: fp(offset), B: fp(1)}
        h.handle_response(0, 0)


def test_epochs_wrap_to_one():
    assert next_epoch(1) == 2 and next_epoch(2**31 - 1) == 1
    h = FetchSessionHandler(1)
    h.build({A: fp(0)}, 12)
    h.handle_response(0, 9)
    h.epoch = 2**31 - 1
    d = h.build({A: fp(1)}, 12)
    assert d.session_epoch == 2**31 - 1
    h.handle_response(0, 9)
    assert h.epoch == 1


def test_repr_names_no_partition_data():
    h = FetchSessionHandler(3)
    assert repr(h) == "FetchSessionHandler(node=3, session_id=0, epoch=0, partitions=0)"


# ---------------------------------------------------------------------- the Fetcher's wire bodies
def listed(req) -> dict[TopicPartition, int]:
    return {TopicPartition(t.get("topic", T), p["partition"]): p["fetch_offset"]
            for t in req.body["topics"] for p in t["partitions"]}


def forgotten(req) -> set[TopicPartition]:
    return {TopicPartition(t.get("topic", T), p) for t in req.body["forgotten_topics_data"] for p in t["partitions"]}


def with_session(response: dict, session_id: int) -> dict:
    response["session_id"] = session_id
    return response


def make(fetch_version=12, **config):
    clock = FakeClock()
    client = ScriptedClient(make_metadata(), fetch_version=fetch_version)
    subs = SubscriptionState("earliest")
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig({"bootstrap.servers": "h1:9092", **config})), clock=clock)
    subs.assign_from_user([TP0, TP1, TP2])
    for tp in (TP0, TP1, TP2):
        subs.seek(tp, 0)
    return clock, client, subs, fetcher


def test_fetch_bodies_over_a_session_life():
    clock, client, subs, fetcher = make()
    fetcher.send_fetches()
    (req,) = client.take()
    assert (req.body["session_id"], req.body["session_epoch"]) == (0, 0)
    assert listed(req) == {TP0: 0, TP1: 0, TP2: 0}
    req.future.complete(with_session(fetch_response([partition_data(0, batch(0, 4))]), 501))
    fetcher.fetched_records()                                  # drain TP0's 4 records
    fetcher.send_fetches()
    (req,) = client.take()
    # Only TP0 moved: TP1 and TP2 stay in the session without being listed.
    assert (req.body["session_id"], req.body["session_epoch"]) == (501, 1)
    assert listed(req) == {TP0: 4} and forgotten(req) == set()
    # An incremental answer may carry a partition that was not listed: it is taken.
    req.future.complete(with_session(fetch_response([partition_data(1, batch(0, 2))]), 501))
    recs = fetcher.fetched_records()[0]
    assert [r.offset for r in recs[TP1]] == [0, 1]
    subs.pause(TP2)
    fetcher.send_fetches()
    (req,) = client.take()
    assert req.body["session_epoch"] == 2
    assert listed(req) == {TP1: 2} and forgotten(req) == {TP2}
    # The broker lost the session: the next fetch, at once, is full and opens a new one.
    req.future.complete(with_session(fetch_response([], error=70), 0))
    assert fetcher.send_fetches() == 1
    (req,) = client.take()
    assert (req.body["session_id"], req.body["session_epoch"]) == (0, 0)
    assert listed(req) == {TP0: 4, TP1: 2}
    # A connection failure: full again, closing the session by id.
    req.future.complete(with_session(fetch_response([]), 502))
    fetcher.send_fetches()
    (req,) = client.take()
    assert (req.body["session_id"], req.body["session_epoch"]) == (502, 1) and listed(req) == {}
    req.future.raise_(Errors.KafkaConnectionError("reset by peer"))
    clock.advance(1000)
    fetcher.send_fetches()
    (req,) = client.take()
    assert (req.body["session_id"], req.body["session_epoch"]) == (502, 0)
    assert listed(req) == {TP0: 4, TP1: 2}


def test_topic_ids_in_listed_forgotten_and_answered_partitions():
    clock, client, subs, fetcher = make(fetch_version=13)
    fetcher.send_fetches()
    (req,) = client.take()
    assert {t["topic_id"] for t in req.body["topics"]} == {TID}
    req.future.complete(with_session(fetch_response([partition_data(0, batch(0, 3))], topic=None, topic_id=TID), 9))
    fetcher.fetched_records()
    subs.pause(TP1)
    fetcher.send_fetches()
    (req,) = client.take()
    assert req.body["forgotten_topics_data"] == [{"topic_id": TID, "partitions": [1]}]
    assert [p["partition"] for t in req.body["topics"] for p in t["partitions"]] == [0]
    # TP2 was not listed but is in the session: its answer, by topic id, is taken.
    req.future.complete(with_session(fetch_response([partition_data(2, batch(0, 2))], topic=None, topic_id=TID), 9))
    assert [r.offset for r in fetcher.fetched_records()[0][TP2]] == [0, 1]


def test_disabled_sessions_list_every_partition_every_time():
    clock, client, subs, fetcher = make(**{"enable.incremental.fetch.sessions": False})
    for _ in range(2):
        fetcher.send_fetches()
        (req,) = client.take()
        assert (req.body["session_id"], req.body["session_epoch"]) == (0, -1)
        assert listed(req) == {TP0: 0, TP1: 0, TP2: 0}
        req.future.complete(with_session(fetch_response([]), 0))


def test_each_fetch_stream_to_a_broker_has_its_own_session():
    clock, client, subs, fetcher = make(**{"fetch.max.in.flight.per.broker": 2})
    fetcher.send_fetches()
    reqs = client.take()
    assert len(reqs) == 2 and all(r.body["session_epoch"] == 0 for r in reqs)
    shares = [set(listed(r)) for r in reqs]
    assert shares[0].isdisjoint(shares[1]) and shares[0] | shares[1] == {TP0, TP1, TP2}
    for i, r in enumerate(reqs):
        r.future.complete(with_session(fetch_response([]), 600 + i))
    fetcher.send_fetches()
    again = client.take()
    assert sorted((r.body["session_id"], r.body["session_epoch"]) for r in again) == [(600, 1), (601, 1)]
    for r in again:   # each partition stays in its stream
        assert set(r.body and listed(r)) <= shares[r.body["session_id"] - 600]
    assert set(fetcher.fetch_sessions) == {(1, 0), (1, 1)}


# ---------------------------------------------------------------------- real brokers
def produce(bootstrap, topic, partitions, n, pad=0):
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(n):
            for part in range(partitions):
                p.send(topic, b"%d:%d:" % (part, i) + b"x" * pad, partition=part)
        p.flush(30)


def consume_all(c, count, timeout_s=60.0):
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for recs in c.poll(100, max_records=50).values():
            out.extend(recs)
    return out


def test_kafka_keeps_one_session_and_accepts_every_epoch(kafka, create_topic, topic_name):
    create_topic(kafka, topic_name, 4)
    produce(kafka.bootstrap, topic_name, 4, 500, pad=100)
    tps = [TopicPartition(topic_name, p) for p in range(4)]
    # Small fetches (about 16 records a partition): many requests in one session.
    with KafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                       max_partition_fetch_bytes=2048) as c:
        c.assign(tps)
        recs = consume_all(c, 2000)
        ((handler),) = c._fetcher.fetch_sessions.values()
        session_id, epoch = handler.session_id, handler.epoch
    assert sorted((r.partition, r.offset) for r in recs) == [(p, o) for p in range(4) for o in range(500)]
    # Kafka checks each epoch: one wrong epoch and it would have answered with an error, and
    # a new session would have been opened.
    assert session_id != 0 and handler.sessions_created == 1
    assert handler.incremental_requests >= 5 and epoch > 5


def test_mock_cluster_without_sessions_is_read_with_full_fetches(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 2)
    produce(mock_cluster.bootstrap, topic_name, 2, 200)
    with KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic_name, p) for p in range(2)])
        recs = consume_all(c, 400)
        sessions = list(c._fetcher.fetch_sessions.values())
    assert sorted((r.partition, r.offset) for r in recs) == [(p, o) for p in range(2) for o in range(200)]
    assert sessions and all(h.sessions_created == 0 and h.incremental_requests == 0 for h in sessions)

"""Fetch responses scanned on the receive thread (kcore.fetchscan), against a real broker.

The reference is what was produced: read through poll(), iteration and poll_columnar(), with
the receive threads scanning the answers (the default), with them off (receive.thread=false)
and with read_committed (decoded on the polling thread), every record must come back the
same; and with the receive threads on, the answers must really have been scanned there.
"""
from __future__ import annotations

import time

import pytest

from kclient.consumer import fetch_collector
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition

PARTITIONS = 2
PER_PARTITION = 3000


def _value(part: int, i: int) -> bytes:
    return b"%d-%d-" % (part, i) + b"v" * (200 + i % 300)


@pytest.fixture(scope="module")
def produced(kafka):
    """A topic of 6,000 records of 200-500 B with keys and some headers (large answers)."""
    from kclient.admin import KafkaAdminClient, NewTopic
    topic = f"fetch-scan-{time.monotonic_ns()}"
    with KafkaAdminClient(bootstrap_servers=kafka.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    kafka.wait_for_topic(topic, PARTITIONS)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=20) as p:
        futures = [p.send(topic, _value(part, i), key=b"k%d" % i, partition=part,
                          headers=[("h", b"%d" % i)] if i % 10 == 0 else None)
                   for i in range(PER_PARTITION) for part in range(PARTITIONS)]
        p.flush(20)
    assert all(f.get().offset >= 0 for f in futures)
    return kafka.bootstrap, topic


@pytest.fixture
def scans(monkeypatch):
    """What each decode of a drained answer was given: the scan's state, or None."""
    seen: list = []
    decode = fetch_collector.decode_columnar

    def recording(data, **kw):
        scanned = kw.get("scanned")
        seen.append(None if scanned is None else scanned.state)
        return decode(data, **kw)
    monkeypatch.setattr(fetch_collector, "decode_columnar", recording)
    return seen


def _consumer(bootstrap: str, topic: str, **settings) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      **settings)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    return c


def _check(records) -> None:
    got = sorted((r.partition, r.offset, r.key, r.value, r.headers) for r in records)
    want = sorted((part, i, b"k%d" % i, _value(part, i), [("h", b"%d" % i)] if i % 10 == 0 else [])
                  for i in range(PER_PARTITION) for part in range(PARTITIONS))
    assert got == want


def _poll_all(c: KafkaConsumer, timeout_s: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
        for recs in c.poll(200, max_records=1000).values():
            out.extend(recs)
    return out


@pytest.mark.parametrize("settings,scanned", [({}, True), ({"receive_thread": False}, False),
                                              ({"isolation_level": "read_committed"}, False)])
def test_poll_returns_what_was_produced_whether_answers_were_scanned_or_decoded(produced, scans, settings,
                                                                                scanned):
    bootstrap, topic = produced
    with _consumer(bootstrap, topic, **settings) as c:
        _check(_poll_all(c))
    assert scans
    if scanned:    # answers too small for a scan (the last ones) are decoded as before
        assert sum(s in ("done", "scanning") for s in scans) >= len(scans) // 2, scans
    else:
        assert set(scans) == {None}


def test_iteration_and_columns_from_scans_are_what_was_produced(produced, scans):
    bootstrap, topic = produced
    with _consumer(bootstrap, topic, consumer_timeout_ms=2000) as c:
        _check(list(c))
    with _consumer(bootstrap, topic) as c:
        rows: list = []
        deadline = time.monotonic() + 30
        while len(rows) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for tp, cols in c.poll_columnar(200, max_records=100_000).items():
                table = cols.to_arrow()
                rows.extend(zip([tp.partition] * len(cols), table.column("offset").to_pylist(),
                                table.column("value").to_pylist()))
    assert sorted(rows) == sorted((p, i, _value(p, i)) for i in range(PER_PARTITION) for p in range(PARTITIONS))
    assert any(s in ("done", "scanning") for s in scans)

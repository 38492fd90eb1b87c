"""kcore.records against a real broker (Apache Kafka, or KCLIENT_TEST_BOOTSTRAP).

1. confluent-kafka (librdkafka) produces with each codec; a raw Fetch brings the batches
   back; both decoders must return exactly what was produced.
2. Uncompressed batches re-encoded by encode_batch are byte-identical to the broker's.
3. Batches encoded by kcore are written with a raw Produce request and read back by
   librdkafka's consumer: kcore's encoder (every codec) against an independent decoder.
"""
from __future__ import annotations

import random
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from kclient.protocol import ApiKey, decode_response, encode_request  # noqa: E402
from kclient.testing import _wire  # noqa: E402
from kcore import records as R  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# A day ago, to the second: Kafka deletes records older than its retention (7 days) at its
# periodic retention check (30 s after start, then every 5 minutes), so records stamped in
# 2023 vanished when a check fell inside a test.
BASE_TS = (int(time.time()) - 86_400) * 1000


def sample_records(seed: int) -> list[tuple]:
    """(key, value, headers, timestamp): null keys, empty values, ~500 KB values, headers."""
    rng = random.Random(seed)
    text = b"the quick brown fox jumps over the lazy dog %d " 
    out = []
    for i in range(40):
        key = None if i % 4 == 0 else b"key-%d" % i
        if i % 7 == 3:
            value = b""
        elif i in (5, 30):
            # large, compressible, not trivially so (so librdkafka keeps the compression)
            value = b"".join(text % rng.randrange(10**6) for _ in range(11_000))[:500_000]
        else:
            value = (text % i) * rng.randrange(1, 20)
        headers = []
        if i % 3 == 1:
            headers = [("trace", b"t-%d" % i), ("empty", b""), ("null", None)]
        out.append((key, value, headers, BASE_TS + i * 10))
    return out


def produce_with_librdkafka(bootstrap: str, topic: str, codec: str, records) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                  "linger.ms": 50, "enable.idempotence": False,
                                  "message.max.bytes": 4 << 20})
    errors = []
    for key, value, headers, ts in records:
        p.produce(topic, value=value, key=key, headers=headers or None, timestamp=ts,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0
    assert errors == []


def fetch_all(bootstrap: str, topic: str, expected: int, version: int = 4,
              timeout: float = 30.0) -> bytes:
    """Raw Fetch requests from offset 0 until `expected` records arrived; returns the bytes
    of all complete batches in order."""
    chunks, offset = [], 0
    deadline = time.monotonic() + timeout
    got = 0
    with _wire.RawConnection.to(bootstrap, timeout) as conn:
        while got < expected:
            assert time.monotonic() < deadline, f"only {got} of {expected} records fetched"
            body = {"replica_id": -1, "max_wait_ms": 200, "min_bytes": 1,
                    "max_bytes": 16 << 20, "isolation_level": 0,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": 0, "fetch_offset": offset,
                         "partition_max_bytes": 8 << 20}]}]}
            conn.send(encode_request(ApiKey.FETCH, version, conn.next_correlation_id(),
                                     "kcore-records-test", body))
            resp = decode_response(ApiKey.FETCH, version, conn.recv_frame())
            part = resp["responses"][0]["partitions"][0]
            assert part["error_code"] == 0, part
            data = part["records"]
            if not data:
                continue
            res = R.decode_records(data, fetch_offset=offset)
            if not res.batches:
                continue
            chunks.append(bytes(data[:res.bytes_consumed]))
            got += len(res.records)
            offset = res.next_offset
    return b"".join(chunks)


@pytest.mark.parametrize("codec", list(CODECS))
def test_librdkafka_batches_decode_exactly(broker, create_topic, topic_name, codec):
    create_topic(broker, topic_name, 1)
    records = sample_records(hash(codec) & 0xFFFF)
    produce_with_librdkafka(broker.bootstrap, topic_name, codec, records)
    data = fetch_all(broker.bootstrap, topic_name, len(records))

    res = R.decode_records(data, topic=topic_name, partition=0)
    assert res.partial_trailing_bytes == 0
    got = [(r.key, r.value, r.headers, r.timestamp) for r in res.records]
    assert got == [(k, v, list(h), ts) for k, v, h, ts in records]
    assert [r.offset for r in res.records] == list(range(len(records)))
    assert {r.timestamp_type for r in res.records} == {0}
    assert all(r.topic == topic_name and r.partition == 0 for r in res.records)
    assert len(res.batches) >= 2            # the two ~500 KB values force a second batch
    codecs_seen = {b.codec for b in res.batches}
    assert CODECS[codec] in codecs_seen, f"librdkafka did not compress with {codec}"
    assert res.next_offset == len(records)

    cb = R.decode_columnar(data)
    from test_records import arrow_rows, columnar_rows
    rows = columnar_rows(cb)
    assert [(k, v, h, ts) for _o, ts, _t, k, v, h in rows] == got
    assert [(o, ts, k, v, h) for o, ts, k, v, h in arrow_rows(cb)] == \
        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in res.records]
    assert cb.zero_copy == (codec == "none")

    # Re-encode every batch from its decoded fields.
    for b in res.batches:
        original = data[b.position:b.position + b.size_in_bytes]
        recs = [(r.offset - b.base_offset, r.timestamp, r.key, r.value, r.headers)
                for r in res.records[b.record_start:b.record_end]]
        again = R.encode_batch(
            recs, base_offset=b.base_offset, codec=b.codec, timestamp_type=b.timestamp_type,
            producer_id=b.producer_id, producer_epoch=b.producer_epoch,
            base_sequence=b.base_sequence, transactional=b.is_transactional,
            partition_leader_epoch=b.partition_leader_epoch, base_timestamp=b.first_timestamp,
            max_timestamp=b.max_timestamp, last_offset_delta=b.last_offset - b.base_offset)
        if b.codec == 0:
            assert again == original, "uncompressed re-encode must be byte-identical"
        else:
            redo = R.decode_records(again)
            assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in redo.records] \
                == [(r.offset, r.key, r.value, r.headers, r.timestamp)
                    for r in res.records[b.record_start:b.record_end]]


def produce_raw(bootstrap: str, topic: str, batch: bytes) -> None:
    # Produce v7: the first version that may carry zstd batches (KIP-110); Apache Kafka refuses
    # them in older versions with UNSUPPORTED_COMPRESSION_TYPE, as it should.
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    with _wire.RawConnection.to(bootstrap, 10.0) as conn:
        conn.send(encode_request(ApiKey.PRODUCE, 7, conn.next_correlation_id(), "kcore-test",
                                 body))
        resp = decode_response(ApiKey.PRODUCE, 7, conn.recv_frame())
    (part,) = resp["responses"][0]["partition_responses"]
    assert part["error_code"] == 0, part


@pytest.mark.parametrize("codec", list(CODECS))
def test_kcore_batches_read_by_librdkafka(broker, create_topic, topic_name, codec):
    create_topic(broker, topic_name, 1)
    records = sample_records(7)[:25]
    batch = R.encode_batch([(None, ts, k, v, h) for k, v, h, ts in records],
                           codec=CODECS[codec])
    produce_raw(broker.bootstrap, topic_name, batch)

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": topic_name,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "fetch.message.max.bytes": 8 << 20})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(records):
            assert time.monotonic() < deadline, f"librdkafka read {len(got)} of {len(records)}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value(), [(k, v) for k, v in (msg.headers() or [])],
                        msg.timestamp()[1], msg.offset()))
    finally:
        consumer.close()
    assert got == [(k, v, list(h), ts, i) for i, (k, v, h, ts) in enumerate(records)]

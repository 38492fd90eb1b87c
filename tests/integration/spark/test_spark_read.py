"""kclient.spark reads: the executor-side range reader (plain Python, real brokers), fork
safety, and read_kafka / mapInArrow / mapPartitions on one shared local[2] SparkSession."""
from __future__ import annotations

import json
import logging
import os
import threading
import time

import pytest

from kclient import errors as Errors
from kclient import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.spark import (OffsetRange, cached_consumer, client_cache_info, close_cached_consumers,
                           commit_offset_ranges, plan_offset_ranges, read_offset_range)
from kclient.structs import TopicPartition
from kclient.testing._wire import wait_until

# A day ago, to the second: Kafka deletes records older than its retention (7 days) at its
# periodic retention check (30 s after start, then every 5 minutes), so records stamped in
# 2023 vanished when a check fell inside a test.
BASE_TS = (int(time.time()) - 86_400) * 1000


def _record(partition: int, i: int) -> tuple:
    """The record number i of a partition: key (None every 7th), value, timestamp, headers."""
    key = None if i % 7 == 3 else b"user-%d" % (i % 13)
    value = b"event %d/%d " % (partition, i) + b"x" * (i % 50)
    headers = [] if i % 3 == 0 else [("source", b"web" if i % 2 else b"app"), ("seq", b"%d" % i)]
    if i % 11 == 5:
        headers.append(("empty", None))
    return key, value, BASE_TS + 1000 * i + partition, headers


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, *, start: int = 0,
             compression: str = "none") -> None:
    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 32768,
                       "compression.type": compression})
    for i in range(start, start + per_partition):
        for part in range(partitions):
            key, value, ts, headers = _record(part, i)
            p.send(topic, key=key, value=value, partition=part, timestamp_ms=ts, headers=headers or None)
    p.flush()
    p.close()


def _options(bootstrap: str, topic: str, **extra) -> dict:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **extra}


# ------------------------------------------------------------------ the range reader
def test_read_offset_range_returns_exactly_the_range(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 2)
    _produce(mock_cluster.bootstrap, topic_name, 2, 300)
    opts = _options(mock_cluster.bootstrap, topic_name)
    # a range that starts and ends inside batches
    records = list(read_offset_range(OffsetRange(topic_name, 1, 17, 211), opts))
    assert [r.offset for r in records] == list(range(17, 211))
    for r in records:
        key, value, ts, headers = _record(1, r.offset)
        assert (r.topic, r.partition, r.key, r.value, r.timestamp) == (topic_name, 1, key, value, ts)
        assert list(r.headers or []) == headers
    assert list(read_offset_range(OffsetRange(topic_name, 0, 5, 5), opts)) == []
    # rows as tuples (topic, partition, from, until) work too, and the partition's client is reused
    before = client_cache_info()
    assert [r.offset for r in read_offset_range((topic_name, 1, 298, 300), opts)] == [298, 299]
    after = client_cache_info()
    assert after["created"] == before["created"] and after["reused"] == before["reused"] + 1


def test_a_reused_spark_worker_freezes_its_heap_after_making_a_client_and_thaws_when_one_closes(monkeypatch):
    """PySpark's daemon collects garbage after every task of a reused worker: the pool freezes
    what is alive once it made a client, and unfreezes when a client is closed (no broker)."""
    import gc
    import weakref

    from kclient.consumer import kafka_consumer
    from kclient.spark import reader

    class FakeClient:
        def __init__(self, params):
            self.params = params

        def close(self, autocommit=True):
            pass

    class Cyclic:
        pass

    # Clients of earlier tests (pooled, or dropped unclosed) have receive threads; one that
    # ends after the freeze below frees frozen objects of its own and moves the count.
    close_cached_consumers()
    gc.collect()
    for thread in [t for t in threading.enumerate() if t.name.startswith("kclient-receive-")]:
        thread.join(30)
        assert not thread.is_alive(), f"{thread.name} of an earlier test's client still runs"
    monkeypatch.setattr(kafka_consumer, "KafkaConsumer", FakeClient)
    gc.unfreeze()                             # whatever an earlier test in this process left
    reader._stats["frozen"] = 0
    try:
        monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
        reader._close(reader._take({"bootstrap.servers": "x:1"}, TopicPartition("t", 0)))
        assert gc.get_freeze_count() == 0 and client_cache_info()["frozen"] == 0   # not a Spark worker
        monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
        entry = reader._take({"bootstrap.servers": "x:1"}, TopicPartition("t", 0))
        frozen = gc.get_freeze_count()
        # The pool records the count it froze; a thread of an earlier test in this process
        # (an asyncio worker, a heartbeat thread winding down) may free a frozen object of its
        # own in between, which lowers the count, never raises it.
        assert 0 < frozen <= client_cache_info()["frozen"]
        later = Cyclic()
        later.self = later
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None                 # objects made after the freeze are still collected
        reader._close(entry)
        assert gc.get_freeze_count() == 0 and client_cache_info()["frozen"] == 0
    finally:
        gc.unfreeze()
        reader._stats["frozen"] = 0


def test_pooled_readers_fetch_with_the_short_wait_and_reread_after_reaching_the_log_end(mock_cluster, create_topic,
                                                                                        topic_name):
    create_topic(mock_cluster, topic_name, 1)
    _produce(mock_cluster.bootstrap, topic_name, 1, 40)
    opts = _options(mock_cluster.bootstrap, topic_name)
    # The first range ends at the end of the log (the client's prefetch then waits there); the
    # next read, elsewhere, goes through the same client.
    assert [r.offset for r in read_offset_range(OffsetRange(topic_name, 0, 10, 40), opts)] == list(range(10, 40))
    assert [r.offset for r in read_offset_range(OffsetRange(topic_name, 0, 0, 5), opts)] == list(range(5))
    with cached_consumer(opts, TopicPartition(topic_name, 0)) as client:
        assert client.config["fetch.max.wait.ms"] == 50
    waiting = _options(mock_cluster.bootstrap, topic_name, **{"kafka.fetch.max.wait.ms": "300"})
    with cached_consumer(waiting, TopicPartition(topic_name, 0)) as client:
        assert client.config["fetch.max.wait.ms"] == 300


def test_control_records_are_skipped_and_a_range_ending_on_one_completes(broker, create_topic, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create_topic(broker, topic_name, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name})
    p.init_transactions(30)
    for batch in (b"a", b"b"):
        p.begin_transaction()
        for i in range(4):
            p.produce(topic_name, value=batch + b"%d" % i, partition=0)
        p.commit_transaction(30)
    # commit_transaction() returns once the coordinator has the commit; it writes the markers
    # into the partition after that, and the last stable offset moves past them then.
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed") as probe:
        wait_until(lambda: probe.end_offsets([tp])[tp] == 10, 30, "the second transaction's marker")
    opts = _options(broker.bootstrap, topic_name, **{"kafka.isolation.level": "read_committed"})
    (rng,) = plan_offset_ranges(opts)
    assert rng == OffsetRange(topic_name, 0, 0, 10)      # 8 records + 2 commit markers
    records = list(read_offset_range(rng, opts))
    assert [(r.offset, r.value) for r in records] == [
        (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"a3"), (5, b"b0"), (6, b"b1"), (7, b"b2"), (8, b"b3")]


def test_range_below_the_earliest_offset_fails_or_skips(records_deletable, create_topic, topic_name, caplog):
    create_topic(records_deletable, topic_name, 1)
    _produce(records_deletable.bootstrap, topic_name, 1, 100)
    records_deletable.delete_records(topic_name, 0, 40)
    opts = _options(records_deletable.bootstrap, topic_name)
    rng = OffsetRange(topic_name, 0, 10, 100)
    with pytest.raises(Errors.DataLossError) as info:
        list(read_offset_range(rng, opts))
    assert "offsets 10 to 39" in str(info.value) and "failOnDataLoss" in str(info.value)
    assert info.value.missing == (10, 40)
    with caplog.at_level(logging.WARNING, logger="kclient.spark.reader"):
        records = list(read_offset_range(rng, {**opts, "failOnDataLoss": "false"}))
    assert [r.offset for r in records] == list(range(40, 100))
    assert any("offsets 10 to 39" in m and "skipping" in m for m in caplog.messages)
    # a range entirely below the log start yields nothing (with a warning)
    assert list(read_offset_range(OffsetRange(topic_name, 0, 0, 30), {**opts, "failOnDataLoss": "false"})) == []


def test_range_past_the_end_of_the_log_fails_or_skips(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 1)
    _produce(mock_cluster.bootstrap, topic_name, 1, 50)
    opts = _options(mock_cluster.bootstrap, topic_name)
    rng = OffsetRange(topic_name, 0, 45, 80)                # planned before the topic was "truncated"
    with pytest.raises(Errors.DataLossError, match="offsets 50 to 79"):
        list(read_offset_range(rng, opts))
    records = list(read_offset_range(rng, {**opts, "failOnDataLoss": "false"}))
    assert [r.offset for r in records] == list(range(45, 50))


def test_no_progress_within_poll_timeout_raises(mock_faults, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 1)
    _produce(mock_faults.bootstrap, topic_name, 1, 20)
    opts = _options(mock_faults.bootstrap, topic_name, **{"kafkaConsumer.pollTimeoutMs": "1500",
                                                           "kafka.request.timeout.ms": "1000"})
    from kclient.admin import KafkaAdminClient
    with KafkaAdminClient({"bootstrap.servers": mock_faults.bootstrap}) as admin:
        (info,) = admin.describe_topics([topic_name])[topic_name]
    leader = info.leader
    mock_faults.broker_set_down(leader)
    try:
        with pytest.raises(Errors.KafkaTimeoutError, match="kafkaConsumer.pollTimeoutMs"):
            list(read_offset_range(OffsetRange(topic_name, 0, 0, 20), opts))
    finally:
        mock_faults.broker_set_up(leader)


# ------------------------------------------------------------------ fork safety
def _local_ports(consumer) -> list[int]:
    """Local ports of a consumer's broker connections (its sockets, identified by 4-tuple)."""
    conns = consumer._client.client._conns.values()
    return sorted(c.sock.getsockname()[1] for c in conns if c.sock is not None)


def test_forked_child_never_uses_the_parents_client(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    _produce(broker.bootstrap, topic_name, 1, 100)
    opts = _options(broker.bootstrap, topic_name)
    assert len(list(read_offset_range(OffsetRange(topic_name, 0, 0, 50), opts))) == 50
    tp = TopicPartition(topic_name, 0)
    with cached_consumer(opts, tp) as parent_client:
        parent_ports = _local_ports(parent_client)
    assert parent_ports
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report and leave without running any parent cleanup
        code = 1
        try:
            os.close(r)
            try:
                parent_client.assignment()
                abandoned = False
            except Errors.IllegalStateError:          # abandon()ed: behaves as closed
                abandoned = True
            report = {"inherited_abandoned": abandoned, "after_fork": client_cache_info()}
            report["read"] = [x.offset for x in read_offset_range(OffsetRange(topic_name, 0, 50, 100), opts)]
            with cached_consumer(opts, tp) as child_client:
                report["same_object"] = child_client is parent_client
                report["ports"] = _local_ports(child_client)
            report["info"] = client_cache_info()
            os.write(w, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    child = json.loads(b"".join(chunks))
    assert child["inherited_abandoned"] is True
    assert child["after_fork"]["idle"] == 0 and child["after_fork"]["dropped_after_fork"] >= 1
    assert child["read"] == list(range(50, 100))
    assert child["same_object"] is False and child["info"]["created"] == 1
    assert child["ports"] and not set(child["ports"]) & set(parent_ports)
    # the parent's client was not closed or disturbed by the child
    with cached_consumer(opts, tp) as again:
        assert again is parent_client
        again.assignment()                               # still open (raises once closed)
        assert _local_ports(again) == parent_ports
    assert [x.offset for x in read_offset_range(OffsetRange(topic_name, 0, 50, 100), opts)] == list(range(50, 100))


# ------------------------------------------------------------------ Spark
@pytest.fixture
def spark(spark_session):
    """The worker's SparkSession (tests/conftest.py), shared with the other Spark test files."""
    return spark_session


def _expected_rows(topic: str, partitions: int, per_partition: int, start: int = 0) -> dict:
    out = {}
    for part in range(partitions):
        for i in range(start, start + per_partition):
            key, value, ts, headers = _record(part, i)
            out[(part, i)] = (key, value, topic, ts, 0, [tuple(h) for h in headers] or None)
    return out


def _collected(df) -> dict:
    out = {}
    for row in df.collect():
        ts_ms = row.timestamp.timestamp()      # pyspark gives naive local time; this inverts it
        headers = None if row.headers is None else [(h.key, h.value) for h in row.headers]
        k = (row.partition, row.offset)
        assert k not in out, f"record {k} read twice"
        out[k] = (row.key, row.value, row.topic, round(ts_ms * 1000), row.timestampType, headers)
    return out


@pytest.mark.parametrize("cluster", ["kafka", "tansu", "mock"], indirect=True)
def test_read_kafka_reads_every_record_once(spark, cluster, create_topic, topic_name):
    from kclient.spark import kafka_schema, read_kafka
    create_topic(cluster, topic_name, 4)
    _produce(cluster.bootstrap, topic_name, 4, 500, compression="lz4" if cluster.kind == "tansu" else "zstd")
    # Tansu counts batches in ListOffsets(latest): the documented probe option makes up for it.
    probe = {"kclient.endOffsetProbe": "true"} if cluster.kind == "tansu" else {}
    df = read_kafka(spark, _options(cluster.bootstrap, topic_name, includeHeaders="true", **probe))
    assert df.schema == kafka_schema(include_headers=True)
    assert _collected(df) == _expected_rows(topic_name, 4, 500)
    plain = read_kafka(spark, _options(cluster.bootstrap, topic_name, **probe))
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_min_partitions_splits_ranges_and_reads_each_record_once(spark, mock_cluster, create_topic, topic_name):
    from kclient.spark import read_kafka
    create_topic(mock_cluster, topic_name, 2)
    _produce(mock_cluster.bootstrap, topic_name, 2, 400)
    opts = _options(mock_cluster.bootstrap, topic_name, minPartitions="6", includeHeaders="true")
    ranges = plan_offset_ranges(opts)
    assert len(ranges) == 6
    df = read_kafka(spark, opts, ranges=ranges)
    assert df.rdd.getNumPartitions() == 6
    assert _collected(df) == _expected_rows(topic_name, 2, 400)


def test_map_partitions_rows_match_map_in_arrow(spark, mock_cluster, create_topic, topic_name):
    from kclient.spark import kafka_schema, range_rows, ranges_dataframe, read_kafka
    create_topic(mock_cluster, topic_name, 3)
    _produce(mock_cluster.bootstrap, topic_name, 3, 120)
    opts = _options(mock_cluster.bootstrap, topic_name, includeHeaders="true")
    ranges = plan_offset_ranges(opts)
    rows = ranges_dataframe(spark, ranges).rdd.mapPartitions(lambda it: range_rows(it, opts))
    by_rows = spark.createDataFrame(rows, kafka_schema(include_headers=True))
    assert _collected(by_rows) == _collected(read_kafka(spark, opts, ranges=ranges)) == \
        _expected_rows(topic_name, 3, 120)


def test_data_loss_through_spark(spark, records_deletable, create_topic, topic_name):
    from kclient.spark import read_kafka
    create_topic(records_deletable, topic_name, 2)
    _produce(records_deletable.bootstrap, topic_name, 2, 60)
    opts = _options(records_deletable.bootstrap, topic_name)
    ranges = plan_offset_ranges(opts)
    records_deletable.delete_records(topic_name, 1, 25)            # after planning, before reading
    with pytest.raises(Exception, match="DataLossError.*offsets 0 to 24"):
        read_kafka(spark, opts, ranges=ranges).count()
    df = read_kafka(spark, {**opts, "failOnDataLoss": "false"}, ranges=ranges)
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, i) for i in range(60)] + [(1, i) for i in range(25, 60)]


def test_workers_use_their_own_clients(spark, broker, create_topic, topic_name):
    import psutil
    from kclient.spark import ranges_dataframe
    create_topic(broker, topic_name, 3)
    _produce(broker.bootstrap, topic_name, 3, 200)
    opts = _options(broker.bootstrap, topic_name, minPartitions="6")
    ranges = plan_offset_ranges(opts)
    broker_port = int(broker.bootstrap.rsplit(":", 1)[1])
    # the driver holds a cached client with open connections of its own
    assert len(list(read_offset_range(ranges[0], opts))) == ranges[0].size
    with cached_consumer(opts, ranges[0].topic_partition) as driver_client:
        driver_ports = set(_local_ports(driver_client))
    assert driver_ports

    def probe(rows):
        import os as _os
        import psutil as _psutil
        from kclient.spark import cached_consumer as _cached, client_cache_info as _info, read_offset_range as _read
        out = []
        for row in rows:
            n = sum(1 for _ in _read(tuple(row), opts))
            with _cached(opts, (row[0], row[1])) as c:
                ports = sorted(x.sock.getsockname()[1] for x in c._client.client._conns.values() if x.sock)
                open_ports = sorted(k.laddr.port for k in _psutil.Process().net_connections(kind="tcp")
                                    if k.raddr and k.raddr.port == broker_port)
                out.append((_os.getpid(), id(c), ports, open_ports, n, _info()["created"]))
        return out

    results = ranges_dataframe(spark, ranges).rdd.mapPartitions(probe).collect()
    assert sum(r[4] for r in results) == sum(r.size for r in ranges)
    me = os.getpid()
    clients: dict[tuple, set] = {}
    for (pid, client_id, ports, open_ports, _, created), r in zip(results, ranges):
        assert pid != me
        assert ports and set(ports) <= set(open_ports)          # its own, live sockets
        assert not set(ports) & driver_ports                    # never the driver's
        assert not set(open_ports) & driver_ports               # nor even an inherited copy
        assert created >= 1                                     # made in that worker process
        clients.setdefault((pid, r.partition), set()).add(client_id)
    # one client per worker process and partition, reused by that worker's tasks
    assert all(len(ids) == 1 for ids in clients.values())
    assert psutil.Process().is_running()


def test_rerun_resumes_from_committed_ranges(spark, mock_cluster, create_topic, topic_name, group_id):
    from kclient.spark import read_kafka
    create_topic(mock_cluster, topic_name, 3)
    _produce(mock_cluster.bootstrap, topic_name, 3, 100)
    opts = _options(mock_cluster.bootstrap, topic_name, startingOffsets="committed",
                    **{"kafka.group.id": group_id, "includeHeaders": "true"})
    first = plan_offset_ranges(opts)
    assert _collected(read_kafka(spark, opts, ranges=first)) == _expected_rows(topic_name, 3, 100)
    commit_offset_ranges(first, opts)
    _produce(mock_cluster.bootstrap, topic_name, 3, 30, start=100)
    second = plan_offset_ranges(opts)
    assert second == [OffsetRange(topic_name, p, 100, 130) for p in range(3)]
    assert _collected(read_kafka(spark, opts, ranges=second)) == _expected_rows(topic_name, 3, 30, start=100)
    commit_offset_ranges(second, opts)
    assert plan_offset_ranges(opts) == []
    empty = read_kafka(spark, opts)                          # nothing new: an empty DataFrame
    assert empty.count() == 0 and len(empty.columns) == 8

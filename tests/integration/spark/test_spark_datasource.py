"""The "kclient" Spark data source: streaming offsets and the rate limit (plain Python), the
stream reader's decisions over fake lookups, and format("kclient") batch and streaming
queries on one shared local[2] SparkSession against real brokers."""
from __future__ import annotations

import threading
import time

import pytest

from kclient import errors as Errors
from kclient.producer import KafkaProducer
from kclient.spark.offsets import from_json_offsets, rate_limit, to_json_offsets
from kclient.spark.planning import EARLIEST, parse_options
from kclient.structs import TopicPartition

pytest.importorskip("pyspark")

A0, A1, A2 = (TopicPartition("a", p) for p in range(3))


# ------------------------------------------------------------------ offsets and the rate limit
def test_offsets_json_round_trip_and_refuse_garbage():
    offsets = {A1: 7, A0: 3, TopicPartition("b", 10): 0}
    as_json = to_json_offsets(offsets)
    assert as_json == {"a": {"0": 3, "1": 7}, "b": {"10": 0}}
    assert from_json_offsets(as_json) == offsets
    for bad in ([], {"a": [1]}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": "5"}}):
        with pytest.raises(Errors.IllegalStateError):
            from_json_offsets(bad)


def test_rate_limit_splits_in_proportion_and_never_exceeds_the_cap():
    start = {A0: 0, A1: 100, A2: 5}
    end = {A0: 600, A1: 400, A2: 105}                       # 600 + 300 + 100 waiting
    capped = rate_limit(start, end, 100)
    assert capped == {A0: 60, A1: 130, A2: 15}
    assert rate_limit(start, end, 2000) == end              # under the cap: everything
    odd = rate_limit(start, end, 7)
    assert sum(odd[tp] - start[tp] for tp in start) == 7
    assert all(start[tp] <= odd[tp] <= end[tp] for tp in start)


def test_rate_limit_does_not_starve_a_small_partition():
    start, end = {A0: 0, A1: 0}, {A0: 1_000_000, A1: 3}
    moved = 0
    for _ in range(3):              # the busy partition keeps its backlog; the small one still moves
        capped = rate_limit(start, end, 100)
        assert sum(capped[tp] - start[tp] for tp in start) == 100
        moved += capped[A1] - start[A1]
        start = {A0: capped[A0], A1: capped[A1]}
        end[A0] += 100
    assert moved == 3


# ------------------------------------------------------------------ streaming options
def _opts(**extra):
    return {"kafka.bootstrap.servers": "localhost:9", "subscribe": "a", **extra}


def test_streaming_options_follow_sparks_source():
    s = parse_options(_opts(), streaming=True)
    assert s.starting == ("offsets", "latest") and s.max_offsets_per_trigger is None
    s = parse_options(_opts(startingOffsets='{"a": {"0": -1, "1": -2, "2": 5}}', maxOffsetsPerTrigger="50"),
                      streaming=True)
    assert s.starting == ("offsets", {A0: -1, A1: EARLIEST, A2: 5}) and s.max_offsets_per_trigger == 50
    for option in ("endingOffsets", "endingTimestamp"):
        with pytest.raises(Errors.ConfigurationError, match=f"'{option}'.*not valid for streaming"):
            parse_options(_opts(**{option: "1"}), streaming=True)
    with pytest.raises(Errors.ConfigurationError, match="'maxOffsetsPerTrigger'.*>= 1"):
        parse_options(_opts(maxOffsetsPerTrigger="0"), streaming=True)
    with pytest.raises(Errors.ConfigurationError, match="'minOffsetsPerTrigger' is not supported"):
        parse_options(_opts(minOffsetsPerTrigger="10"), streaming=True)
    with pytest.raises(Errors.ConfigurationError, match="'kclient.commitOffsets'.*kafka.group.id"):
        parse_options(_opts(**{"kclient.commitOffsets": "true"}), streaming=True)
    with pytest.raises(Errors.ConfigurationError, match="unknown option 'maxOffsetPerTrigger'.*maxOffsetsPerTrigger"):
        parse_options(_opts(maxOffsetPerTrigger="5"), streaming=True)
    # a batch read accepts the streaming options, and says they do nothing there
    batch = parse_options(_opts(maxOffsetsPerTrigger="5"))
    assert any("'maxOffsetsPerTrigger' only applies to streaming" in note for note in batch.ignored)
    # groupIdPrefix could only be ignored (the source joins no group): refused, batch or stream
    for streaming in (False, True):
        with pytest.raises(Errors.ConfigurationError, match="'groupIdPrefix': not supported"):
            parse_options(_opts(groupIdPrefix="x"), streaming=streaming)


def test_the_source_names_options_as_documented_and_refuses_a_custom_schema():
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import StructType
    from kclient.spark.datasource import KafkaDataSource
    source = KafkaDataSource(CaseInsensitiveDict(_opts(StartingOffsets="latest")))   # Spark lower-cases names
    with pytest.raises(Errors.ConfigurationError, match="'startingOffsets': 'latest' is not allowed for batch"):
        source.reader(source.schema())
    with pytest.raises(Errors.ConfigurationError, match="unknown option 'maxoffsetpertrigger'.*'maxOffsetsPerTrigger'"):
        KafkaDataSource(CaseInsensitiveDict(_opts(maxOffsetPerTrigger="1"))).reader(source.schema())
    with pytest.raises(Errors.ConfigurationError, match="fixed schema"):
        KafkaDataSource(CaseInsensitiveDict(_opts())).reader(StructType([]))


def test_register_hands_the_sessions_default_parallelism_to_the_source():
    from pyspark import cloudpickle
    from pyspark.sql.datasource import CaseInsensitiveDict
    from kclient.spark.datasource import KafkaDataSource, register

    class Session:          # what register() reads of a SparkSession
        def __init__(self, cores):
            self.registered = []
            self.sparkContext = type("Context", (), {"defaultParallelism": cores})()
            self.dataSource = type("Registry", (), {"register": lambda _, cls: self.registered.append(cls)})()

    session = Session(6)
    register(session)
    (source,) = session.registered
    assert issubclass(source, KafkaDataSource) and source.name() == "kclient" and source.session_cores == 6
    # Spark pickles the registered class to its planner's process: the cores go with it
    shipped = cloudpickle.loads(cloudpickle.dumps(source))
    assert shipped.session_cores == 6
    instance = shipped(CaseInsensitiveDict(_opts()))
    assert instance.reader(instance.schema()).session_cores == 6
    assert instance.streamReader(instance.schema()).session_cores == 6
    assert KafkaDataSource.session_cores is None

    class Connect(Session):  # Spark Connect sessions have no SparkContext
        @property
        def sparkContext(self):
            raise RuntimeError("not supported in Spark Connect")

        @sparkContext.setter
        def sparkContext(self, _):
            pass

    connect = Connect(0)
    register(connect)
    assert connect.registered == [KafkaDataSource]


# ------------------------------------------------------------------ the stream reader over fake lookups
class _Lookups:
    def __init__(self, earliest, latest):
        self.earliest_offsets, self.latest_offsets = earliest, latest

    def partitions(self):
        return sorted(self.latest_offsets)

    def earliest(self, tps):
        return {tp: self.earliest_offsets[tp] for tp in tps}

    def latest(self, tps):
        return {tp: self.latest_offsets[tp] for tp in tps}

    def close(self):
        pass


def _stream_reader(lookups, **extra):
    from kclient.spark.datasource import spark_arrow_schema
    from kclient.spark.stream import KafkaStreamReader
    reader = KafkaStreamReader(_opts(**extra), spark_arrow_schema(False))
    reader._lookups = lookups
    return reader


def test_stream_reader_new_partitions_start_at_earliest_and_lost_ones_follow_fail_on_data_loss(caplog):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
    lookups = _Lookups({A0: 0, A1: 0}, {A0: 50, A1: 20})
    reader = _stream_reader(lookups, startingOffsets="earliest")
    start = reader.initialOffset()
    assert start == {"a": {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadAllAvailable()
    lookups.latest_offsets[A2] = 30                                  # a partition was added
    lookups.earliest_offsets[A2] = 0
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"a": {"0": 50, "1": 20, "2": 30}}
    ranges = [r for p in reader.partitions(start, end) for r in p.ranges]
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges] == [(0, 0, 50), (1, 0, 20), (2, 0, 30)]
    # the rate limit counts a new partition's backlog from its earliest offset
    lookups.latest_offsets[TopicPartition("a", 3)] = 100
    lookups.earliest_offsets[TopicPartition("a", 3)] = 0
    capped = from_json_offsets(reader.latestOffset(end, ReadMaxRows(10)))
    assert capped[TopicPartition("a", 3)] == 10 and sum(capped.values()) - 100 == 10
    # a partition that disappeared is data loss, or a warning with failOnDataLoss=false
    del lookups.latest_offsets[A1]
    with pytest.raises(Errors.DataLossError, match="a-1 no longer exist"):
        reader.latestOffset(end, ReadAllAvailable())
    lenient = _stream_reader(lookups, failOnDataLoss="false")
    assert "1" not in lenient.latestOffset(end, ReadAllAvailable())["a"]
    assert any("a-1 no longer exist" in m for m in caplog.messages)
    # a partition added with records already deleted is data loss too
    lookups.earliest_offsets[A2] = 5
    with pytest.raises(Errors.DataLossError, match="new partition a-2 starts at offset 5"):
        reader.partitions({"a": {"0": 0}}, {"a": {"0": 0, "2": 30}})


class _CountingLookups(_Lookups):
    def __init__(self, earliest, latest):
        super().__init__(earliest, latest)
        self.listed = 0

    def partitions(self):
        self.listed += 1
        return super().partitions()


def test_stream_reader_resolves_its_start_once_and_lists_partitions_once_per_micro_batch():
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    lookups = _CountingLookups({A0: 0, A1: 0}, {A0: 50, A1: 20})
    reader = _stream_reader(lookups)                      # startingOffsets: latest, the streaming default
    start = reader.initialOffset()
    assert start == {"a": {"0": 50, "1": 20}} and lookups.listed == 1
    lookups.latest_offsets.update({A0: 60, A1: 25})       # produced after the query started
    # Spark asks again before it plans the first micro-batch: the start does not move
    assert reader.initialOffset() == start and lookups.listed == 1
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"a": {"0": 60, "1": 25}} and lookups.listed == 2
    ranges = [(r.partition, r.from_offset, r.until_offset) for p in reader.partitions(start, end) for r in p.ranges]
    assert ranges == [(0, 50, 60), (1, 20, 25)] and lookups.listed == 2
    # each micro-batch asks the cluster for the partitions again: one added is read
    lookups.latest_offsets[A2], lookups.earliest_offsets[A2] = 7, 0
    assert reader.latestOffset(end, ReadAllAvailable()) == {"a": {"0": 60, "1": 25, "2": 7}}
    assert lookups.listed == 3
    available_now = _stream_reader(_CountingLookups({A0: 0}, {A0: 40}), startingOffsets="earliest")
    available_now.prepareForTriggerAvailableNow()
    assert available_now.initialOffset() == {"a": {"0": 0}} and available_now._lookups.listed == 1


def test_stream_reader_available_now_stops_at_the_offsets_of_its_start():
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
    lookups = _Lookups({A0: 0}, {A0: 40})
    reader = _stream_reader(lookups, startingOffsets="earliest", maxOffsetsPerTrigger="25")
    assert reader.getDefaultReadLimit() == ReadMaxRows(25)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    lookups.latest_offsets.update({A0: 90, A1: 10})               # produced and added afterwards
    lookups.earliest_offsets[A1] = 0
    first = reader.latestOffset(start, ReadMaxRows(25))
    assert first == {"a": {"0": 25}}
    assert reader.latestOffset(first, ReadAllAvailable()) == {"a": {"0": 40}}
    assert reader.latestOffset({"a": {"0": 40}}, ReadMaxRows(25)) == {"a": {"0": 40}}   # done
    assert reader.reportLatestOffset() == {"a": {"0": 90, "1": 10}}
    # the reader Spark pickles for executors carries no client
    import pickle
    assert pickle.loads(pickle.dumps(reader))._lookups is None


# ------------------------------------------------------------------ Spark, real brokers
@pytest.fixture
def spark(spark_session):
    """The worker's SparkSession (tests/conftest.py), shared with the other Spark test files."""
    return spark_session


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + per_partition):
        for part in range(partitions):
            p.send(topic, key=b"k%d" % (i % 17), value=b"p%d-%d" % (part, i), partition=part,
                   headers=[("n", b"%d" % i)] if i % 2 else None)
    p.flush()
    p.close()


def _expected(partitions: int, per_partition: int) -> dict:
    return {(part, i): b"p%d-%d" % (part, i) for part in range(partitions) for i in range(per_partition)}


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("cluster", ["kafka", "tansu"], indirect=True)
def test_batch_read_equals_what_was_produced(spark, cluster, create_topic, topic_name):
    from kclient.spark import kafka_schema
    create_topic(cluster, topic_name, 3)
    _produce(cluster.bootstrap, topic_name, 3, 300)
    # Tansu counts batches in ListOffsets(latest): the documented probe option makes up for it.
    probe = {"kclient.endOffsetProbe": "true"} if cluster.kind == "tansu" else {}
    # no register(): Spark finds the source through the pyspark_kclient module
    df = (spark.read.format("kclient").option("kafka.bootstrap.servers", cluster.bootstrap)
          .option("subscribe", topic_name).option("includeHeaders", "true").options(**probe).load())
    assert df.schema == kafka_schema(include_headers=True)
    rows = df.collect()
    assert {(r.partition, r.offset): r.value for r in rows} == _expected(3, 300)
    assert len(rows) == 900 and {r.topic for r in rows} == {topic_name}
    odd = [r for r in rows if r.offset % 2]
    assert all([(h.key, h.value) for h in r.headers] == [("n", b"%d" % r.offset)] for r in odd)
    assert all(r.headers is None for r in rows if r.offset % 2 == 0)


def test_batch_errors_name_the_option(spark, kafka, topic_name):
    from kclient.spark import register
    register(spark)
    reader = spark.read.format("kclient").option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", "x")
    with pytest.raises(Exception, match="unknown option 'startingoffset'.*did you mean 'startingOffsets'"):
        reader.option("startingOffset", "earliest").load()
    with pytest.raises(Exception, match="'endingOffsets'.*not valid for streaming"):
        spark.readStream.format("kclient").option("kafka.bootstrap.servers", kafka.bootstrap) \
            .option("subscribe", "x").option("endingOffsets", "latest").load() \
            .writeStream.format("noop").start().awaitTermination(30)


def test_streaming_query_restarted_while_producing_writes_every_record_once(spark, kafka, create_topic, topic_name,
                                                                           group_id, tmp_path):
    create_topic(kafka, topic_name, 3)
    _produce(kafka.bootstrap, topic_name, 3, 200)                    # a backlog before the query starts
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    batches: list[int] = []

    def write(df, batch_id):
        # Idempotent per micro-batch: a batch replayed after the restart overwrites its own output.
        df.select("partition", "offset", "value").write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))
        batches.append(batch_id)

    def start():
        return (spark.readStream.format("kclient").option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", topic_name).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "300").option("kafka.group.id", group_id)
                .option("kclient.commitOffsets", "true").load()
                .writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint)).start())

    produced = {"n": 200}
    stop = threading.Event()

    def keep_producing():
        # A few records per partition at a time, paced, until the query has been restarted and
        # has run again: records arrive before, during and after the restart.
        p = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
        try:
            while not stop.wait(0.1) and produced["n"] < 1000:
                for i in range(produced["n"], produced["n"] + 5):
                    for part in range(3):
                        p.send(topic_name, key=b"k%d" % (i % 17), value=b"p%d-%d" % (part, i), partition=part)
                p.flush()
                produced["n"] += 5
        finally:
            p.close()

    producer = threading.Thread(target=keep_producing, daemon=True)
    query = start()
    try:
        producer.start()
        _wait_for(lambda: len(batches) >= 2, 90, "two micro-batches")
        query.stop()
        seen = len(batches)
        query = start()                                              # same checkpoint
        _wait_for(lambda: len(batches) >= seen + 2, 90, "two micro-batches after the restart")
    finally:
        stop.set()
        producer.join(60)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    got: dict = {}
    for r in rows:
        assert (r.partition, r.offset) not in got, f"record {r.partition}/{r.offset} written twice"
        got[(r.partition, r.offset)] = r.value
    assert got == _expected(3, produced["n"])
    # the group's offsets follow the query, for lag monitoring (Spark commits a micro-batch's
    # offsets to the source when it plans the next one: the last may not be there yet)
    from kclient.admin import KafkaAdminClient
    with KafkaAdminClient({"bootstrap.servers": kafka.bootstrap}) as admin:
        committed = admin.list_consumer_group_offsets(group_id)
    assert sorted(tp.partition for tp in committed) == [0, 1, 2]
    assert all(0 < om.offset <= produced["n"] for om in committed.values())


def test_a_query_from_latest_on_a_busy_topic_reads_on_from_where_it_started(spark, kafka, create_topic, topic_name,
                                                                             tmp_path):
    """Spark asks for the initial offset again when it plans the first micro-batch; "latest"
    resolved anew while records arrive was past that micro-batch's end (a data-loss error)."""
    create_topic(kafka, topic_name, 2)
    stop = threading.Event()

    def keep_producing():
        p = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 1})
        try:
            i = 0
            while not stop.wait(0.002):
                p.send(topic_name, value=b"%d" % i, partition=i % 2)
                i += 1
        finally:
            p.close()

    offsets: list[tuple[int, int]] = []
    batches: list[int] = []

    def write(df, batch_id):
        offsets.extend((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        batches.append(batch_id)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    query = None
    try:
        _wait_for(lambda: sum(_end_offsets(kafka.bootstrap, topic_name)) > 0, 30, "records")
        query = (spark.readStream.format("kclient").option("kafka.bootstrap.servers", kafka.bootstrap)
                 .option("subscribe", topic_name).load()
                 .writeStream.foreachBatch(write).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="200 milliseconds").start())
        _wait_for(lambda: len(batches) >= 2 or query.exception() is not None, 90, "two micro-batches")
        assert query.exception() is None
    finally:
        if query is not None:
            query.stop()
        stop.set()
        producer.join(30)
    by_partition: dict[int, list[int]] = {}
    for part, off in sorted(offsets):
        by_partition.setdefault(part, []).append(off)
    assert sum(map(len, by_partition.values())) > 0
    for part, offs in by_partition.items():
        assert offs == list(range(offs[0], offs[0] + len(offs))), f"partition {part}: a gap or a record read twice"


def _end_offsets(bootstrap: str, topic: str) -> list[int]:
    from kclient.admin import KafkaAdminClient, OffsetSpec
    with KafkaAdminClient({"bootstrap.servers": bootstrap}) as admin:
        found = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(2)})
    return [info.offset for info in found.values()]


def test_max_offsets_per_trigger_is_honoured_by_available_now(spark, kafka, create_topic, topic_name, tmp_path):
    create_topic(kafka, topic_name, 3)
    p = KafkaProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for part, count in enumerate((500, 200, 50)):
        for i in range(count):
            p.send(topic_name, value=b"%d" % i, partition=part)
    p.flush()
    p.close()
    sizes: list[int] = []
    tasks: list[int] = []
    seen: set = set()

    def record(df, batch_id):
        pairs = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
        sizes.append(len(pairs))
        tasks.append(df.rdd.getNumPartitions())
        seen.update(pairs)

    # kclient.maxPartitions=1: each micro-batch's ranges (up to 3) are read by one task
    query = (spark.readStream.format("kclient").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", topic_name).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "200").option("kclient.maxPartitions", "1").load()
             .writeStream.foreachBatch(record).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    assert query.awaitTermination(120), "the availableNow query did not finish"
    assert query.exception() is None
    assert sizes == [200, 200, 200, 150]
    assert tasks == [1, 1, 1, 1]
    assert seen == {(0, i) for i in range(500)} | {(1, i) for i in range(200)} | {(2, i) for i in range(50)}


def test_max_partitions_packs_a_batch_read_into_that_many_tasks(spark, kafka, create_topic, topic_name):
    create_topic(kafka, topic_name, 3)
    _produce(kafka.bootstrap, topic_name, 3, 120)
    batch = (spark.read.format("kclient").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", topic_name).option("kclient.maxPartitions", "2").load())
    assert batch.rdd.getNumPartitions() == 2
    per_task = batch.rdd.mapPartitions(lambda it: [[(r.partition, r.offset, r.value) for r in it]]).collect()
    rows = [row for task in per_task for row in task]
    assert len(rows) == 360 and {(p, o): v for p, o, v in rows} == _expected(3, 120)
    # whole Kafka partitions per task (one task has two), each in offset order
    assert sorted(len({p for p, _, _ in task}) for task in per_task) == [1, 2]
    for task in per_task:
        for part in {p for p, _, _ in task}:
            offsets = [o for p, o, _ in task if p == part]
            assert offsets == list(range(120))

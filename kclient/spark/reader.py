"""Reading planned offset ranges on executors (``foreachPartition`` / ``mapPartitions``).

``read_offset_range(offset_range, options)`` yields the range's records (kclient
ConsumerRecord, kafka-python's shape); ``range_rows`` yields them as tuples in the Spark Kafka
source's column order, for ``mapPartitions`` + ``createDataFrame``; the Arrow reader
(kclient.spark.arrow) uses the columnar variant of the same loop.

Reading a range: the consumer is assigned the one partition (no group membership, no
auto-commit, ``auto.offset.reset=none``), seeks to ``from_offset`` and polls until its
position reaches ``until_offset``; records at or past ``until_offset`` are dropped. Control
records and (with ``kafka.isolation.level=read_committed``) aborted transactions never reach
the caller, and the position moves past them, so a range ending in them still completes.

The clients fetch with ``fetch.max.wait.ms`` at 50 ms unless ``kafka.fetch.max.wait.ms`` is
given: the records of a planned range exist, and the only fetch that waits on the broker, a
prefetch past the end of the log, would otherwise hold a reused client for 500 ms before it
can read another offset (see ``reader_client_params``).

Missing records (retention or DeleteRecords moved the log start past the position, or the
log now ends before the range does) are data loss: with ``failOnDataLoss`` true (default)
DataLossError names the missing offsets; with false, a warning names them and reading goes
on after the gap. A poll that makes no progress for ``kafkaConsumer.pollTimeoutMs`` (default
120000) raises KafkaTimeoutError.

Fork safety. The PySpark daemon forks its workers, and user code may fork too: a socket or
selector made in one process must never be used in another (requests would interleave on
the shared connection, and closing would unregister the parent's sockets from the epoll set
both processes share). So clients are cached per process: a module-level pool keyed by
``os.getpid()``, the client settings and the partition (one client per partition read, as
Spark's own source does), reused by the tasks a worker runs one after the other, the least
recently used closed beyond 16 idle ones. ``os.register_at_fork(after_in_child=...)`` drops
inherited clients in a new child without closing them (``KafkaConsumer.abandon()``: their
finalizers leave the parent's sockets alone); a pid check on every borrow covers forks that
bypass ``os.fork``.

Garbage collection in reused workers. PySpark's daemon runs a full ``gc.collect()`` in a
reused worker after every task (pyspark/daemon.py). With pyspark, pyarrow and kclient
imported and the pool's clients alive, that walks some 80,000 objects: about 30 ms of CPU
per task (measured with Spark 4.2), more than reading a 30,000-record range takes, so short
tasks (a micro-batch's ranges) spent more time collecting than reading. In a worker that
Spark reuses (``SPARK_REUSE_WORKER`` set), the pool therefore calls ``gc.freeze()`` after it
made a client: what is alive then (modules, pooled clients) moves to the permanent
generation that collections skip; objects of later tasks are collected as before. The cost
is one collection per client made. Closing a pooled client (evicted, broken, or dropped
after a fork) calls ``gc.unfreeze()``, so that its reference cycles are collected; the next
new client freezes again.
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import gc
import logging
import os
import threading
import time
from typing import Any, Iterable, Iterator, Mapping

from kclient import errors as Errors
from kclient.spark.planning import OffsetRange, SourceOptions, parse_options
from kclient.structs import TopicPartition

__all__ = ["read_offset_range", "read_offset_ranges", "range_rows", "cached_consumer", "client_cache_info",
           "as_offset_range"]

log = logging.getLogger(__name__)

_POLL_SLICE_MS = 1000       # one poll waits at most this long: no-progress checks run between polls
_CHECK_INTERVAL_S = 1.0     # lookups for a suspected gap, at most this often
_PAST_END_GRACE_S = 2.0     # no records this long before "the log ends before the range" is data loss
_MAX_IDLE = 16              # idle clients kept per process (least recently used ones are closed)
#: A reader client's ``fetch.max.wait.ms`` unless ``kafka.fetch.max.wait.ms`` is given (see
#: reader_client_params). Above 0: Tansu answers a fetch that may not wait with no partitions.
READER_FETCH_WAIT_MS = 50
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


# ------------------------------------------------------------------ per-process client pool
class _Pooled:
    __slots__ = ("consumer", "pid", "key")

    def __init__(self, consumer, pid: int, key: tuple):
        self.consumer = consumer
        self.pid = pid
        self.key = key


_pool_lock = threading.Lock()
_pool_pid = os.getpid()
_idle: "collections.OrderedDict[tuple, list[_Pooled]]" = collections.OrderedDict()
_stats = {"created": 0, "reused": 0, "evicted": 0, "dropped_after_fork": 0, "frozen": 0}


def _disown(entry: _Pooled) -> None:
    """Forget a client made by another process without touching its sockets (see
    KafkaConsumer.abandon): closing them here would remove the parent's registrations from
    the epoll set both processes share."""
    entry.consumer.abandon()


def _forget_inherited() -> None:
    """In a freshly forked child: drop every client the parent had (see the module doc)."""
    global _pool_lock, _pool_pid, _idle
    # The lock may have been held by a parent thread that does not exist in this process.
    _pool_lock = threading.Lock()
    inherited = [e for entries in _idle.values() for e in entries]
    _idle = collections.OrderedDict()
    _pool_pid = os.getpid()
    for entry in inherited:
        _disown(entry)
    if inherited:
        _thaw()
    _stats.update(created=0, reused=0, evicted=0)
    _stats["dropped_after_fork"] += len(inherited)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)


def reader_client_params(opts: SourceOptions) -> dict[str, Any]:
    """The settings of the clients that read planned ranges: ``client_params()`` with
    ``fetch.max.wait.ms`` at ``READER_FETCH_WAIT_MS`` unless the options set it.

    A planned range's records exist when it is read (its end is at most the latest offset
    when it was planned), so the broker never has to wait for records the reader needs. The
    one fetch that waits is the client's prefetch past a range that ends at the end of the
    log, which is where every micro-batch of a stream that keeps up ends. While it waits, the
    client cannot fetch at another offset: a task that gets this partition at another offset
    (the next micro-batch's task on another worker, the next job over the same records)
    would wait the client's default 500 ms for nothing, once per range it reads."""
    params = opts.client_params()
    if not any(str(k).replace("_", ".").lower() == "fetch.max.wait.ms" for k in params):
        params["fetch.max.wait.ms"] = READER_FETCH_WAIT_MS
    return params


def _settings_key(params: Mapping[str, Any]) -> str:
    return repr(sorted((str(k), repr(v)) for k, v in params.items()))


def _take(params: dict[str, Any], tp: TopicPartition | None) -> _Pooled:
    from kclient.consumer.kafka_consumer import KafkaConsumer
    pid = os.getpid()
    key = (_settings_key(params), tp)
    with _pool_lock:
        if pid != _pool_pid:      # forked without os.fork's hooks
            _forget_inherited()
        entries = _idle.get(key)
        if entries:
            entry = entries.pop()
            if not entries:
                del _idle[key]
            _stats["reused"] += 1
            return entry
        _stats["created"] += 1
    log.debug("process %d: new Kafka client for Spark reads of %s", pid, tp)
    entry = _Pooled(KafkaConsumer(dict(params)), pid, key)
    if os.environ.get("SPARK_REUSE_WORKER"):
        _freeze_heap()
    return entry


def _freeze_heap() -> None:
    """Keep what is alive now out of later collections (see the module doc): collect first,
    so that no garbage is frozen with it."""
    gc.collect()
    gc.freeze()
    _stats["frozen"] = gc.get_freeze_count()


def _close(entry: _Pooled) -> None:
    try:
        entry.consumer.close(autocommit=False)
    except Exception as exc:  # closing is best effort
        log.debug("closing a Spark reader client failed: %s", exc)
    _thaw()


def _thaw() -> None:
    """A client that may have been frozen is gone: give the frozen objects back to the
    collector, so that its reference cycles are reclaimed (the next new client freezes again)."""
    if _stats["frozen"]:
        gc.unfreeze()
        _stats["frozen"] = 0


def _give_back(entry: _Pooled, broken: bool) -> None:
    if entry.pid != os.getpid():
        _disown(entry)
        return
    if broken:
        _close(entry)
        return
    evicted = []
    with _pool_lock:
        _idle.setdefault(entry.key, []).append(entry)
        _idle.move_to_end(entry.key)
        while sum(len(v) for v in _idle.values()) > _MAX_IDLE:
            key, entries = next(iter(_idle.items()))
            evicted.append(entries.pop(0))
            if not entries:
                del _idle[key]
        _stats["evicted"] += len(evicted)
    for old in evicted:
        _close(old)


@contextlib.contextmanager
def cached_consumer(options: Mapping[str, Any] | SourceOptions, topic_partition: Any = None):
    """Borrow this process's reader client for these options and partition (made on first
    use, reused by later borrows in the same process, never shared across processes).

    One client per partition, as Spark's own source does: a range leaves a prefetch in
    flight for its partition, which then serves the next range of that partition, and never
    delays a read of another partition (a broker connection carries one fetch at a time)."""
    opts = parse_options(options)
    tp = None if topic_partition is None else TopicPartition(*topic_partition)
    entry = _take(reader_client_params(opts), tp)
    broken = False
    try:
        yield entry.consumer
    except BaseException as exc:
        # A client in an unknown state (interrupted mid-request, or failing) is not reused.
        broken = not isinstance(exc, (Errors.DataLossError, GeneratorExit))
        raise
    finally:
        _give_back(entry, broken)


def client_cache_info() -> dict[str, int]:
    """This process's pool: pid, idle clients, and since the last fork the clients created,
    reused, evicted (beyond the idle limit) and dropped after the fork; ``frozen``: objects
    in the permanent GC generation after the pool's last ``gc.freeze()`` (0: none)."""
    with _pool_lock:
        idle = sum(len(v) for v in _idle.values())
        return {"pid": _pool_pid, "idle": idle, **_stats}


def close_cached_consumers() -> int:
    """Close this process's idle reader clients (and what they prefetched); returns how many.
    The next borrow makes a fresh client. For a worker that should let go of its broker
    connections, and for tests that model a query restarted in fresh workers."""
    with _pool_lock:
        entries = [e for v in _idle.values() for e in v]
        _idle.clear()
    for entry in entries:
        if entry.pid == os.getpid():
            _close(entry)
        else:
            _disown(entry)
    return len(entries)


# ------------------------------------------------------------------ the read loop
def as_offset_range(value: Any) -> OffsetRange:
    """An OffsetRange from an OffsetRange, a Row/tuple (topic, partition, from, until) or a dict."""
    if isinstance(value, OffsetRange):
        return value
    if isinstance(value, Mapping):
        return OffsetRange(str(value["topic"]), int(value["partition"]), int(value["from_offset"]),
                           int(value["until_offset"]))
    topic, partition, start, until = value
    return OffsetRange(str(topic), int(partition), int(start), int(until))


def _report_loss(opts: SourceOptions, rng: OffsetRange, lo: int, hi: int, earliest: int, latest: int) -> None:
    message = (f"data loss in {rng.topic}-{rng.partition}: offsets {lo} to {hi - 1} (of the planned range "
               f"{rng.from_offset} to {rng.until_offset - 1}) are no longer available; the partition now holds "
               f"offsets {earliest} to {latest - 1} (records aged out by retention, deleted, or the topic was "
               f"recreated)")
    if opts.fail_on_data_loss:
        err = Errors.DataLossError(message + ". Set failOnDataLoss to false to skip them.")
        err.topic_partition = rng.topic_partition
        err.missing = (lo, hi)
        raise err
    log.warning("%s; skipping them (failOnDataLoss is false)", message)


def _after_gap(consumer, tp: TopicPartition, rng: OffsetRange, position: int, opts: SourceOptions,
               out_of_range: bool, past_end_ok: bool) -> int | None:
    """If records at ``position`` are gone, report the loss and return where to go on;
    None if nothing is missing (the records may simply not have arrived yet) or the
    lookups failed (the broker may be down: the no-progress timeout decides then).

    "The log now ends before the position" is only concluded when the broker said so
    (out_of_range) or after a grace period without records (past_end_ok): until a fetch
    answered, the high watermark may be stale, and Tansu's ListOffsets(latest) can be
    below the true end."""
    timeout = max(1000, min(opts.poll_timeout_ms, 30000))
    try:
        earliest = consumer.beginning_offsets([tp], timeout_ms=timeout)[tp]
        latest = consumer.end_offsets([tp], timeout_ms=timeout)[tp]
    except Errors.KafkaError as exc:
        if not (exc.retriable or exc.invalid_metadata):
            raise
        log.debug("offset lookups for %s failed (%s); retrying later", tp, exc)
        return position if out_of_range else None
    hw = consumer.highwater(tp)
    if hw is not None:
        latest = max(latest, hw)
    until = rng.until_offset
    if position < earliest:
        resume = min(earliest, until)
        _report_loss(opts, rng, position, resume, earliest, latest)
        return resume
    if position >= latest and (out_of_range or past_end_ok):
        _report_loss(opts, rng, position, until, earliest, latest)
        return until
    if out_of_range:
        return position      # the broker's answer raced a change; fetch again from here
    return None


def _known_position(consumer, tp: TopicPartition) -> int | None:
    """The client's position if it knows one now (None if it would have to look it up, e.g.
    while a leader change is validated): a pooled client is then seeked, never left waiting."""
    try:
        return consumer.position(tp, timeout_ms=0)
    except Errors.KafkaError:
        return None


def _chunks(rng: OffsetRange, opts: SourceOptions, columnar: bool) -> Iterator[tuple[Any, int]]:
    """(chunk, n) pairs: the first n rows of chunk are the range's next records. A chunk is
    a ColumnarRecords (columnar) or a list of ConsumerRecord."""
    if rng.size <= 0:
        return
    tp = rng.topic_partition
    until = rng.until_offset
    batch = opts.max_records_per_batch
    poll_timeout_s = opts.poll_timeout_ms / 1000.0
    slice_ms = min(_POLL_SLICE_MS, opts.poll_timeout_ms)
    with cached_consumer(opts, tp) as consumer:
        # A few fetch answers' time: long enough for a fresh high watermark.
        wait_s = int(consumer.config["fetch.max.wait.ms"]) / 1000.0
        past_end_grace_s = min(max(_PAST_END_GRACE_S, 3 * wait_s), poll_timeout_s)
        if consumer.assignment() != {tp} or _known_position(consumer, tp) != rng.from_offset:
            if consumer.assignment() != {tp}:
                consumer.assign([tp])
            consumer.seek(tp, rng.from_offset)
        # else: the client's last range ended where this one starts (the next micro-batch of
        # a stream): what it prefetched past that end is this range's start, and a seek
        # would throw it away.
        position = rng.from_offset
        last_progress = time.monotonic()
        next_check = 0.0
        while position < until:
            try:
                # No more than the range holds: the position then stops at its end, and the
                # records after it stay buffered, undecoded, for a range that starts there.
                wanted = min(batch, until - position)
                if columnar:
                    polled = consumer.poll_columnar(slice_ms, max_records=wanted)
                else:
                    polled = consumer.poll(slice_ms, max_records=wanted)
            except Errors.OffsetOutOfRangeError:
                resume = _after_gap(consumer, tp, rng, position, opts, out_of_range=True, past_end_ok=True)
                position = resume if resume is not None else position
                if position < until:
                    consumer.seek(tp, position)
                last_progress = time.monotonic()
                continue
            got = polled.get(tp)
            if got:
                yield got, _rows_before(got, until, columnar)
            now = time.monotonic()
            new_position = consumer.position(tp)
            if new_position > position:
                position = new_position
                last_progress = now
                continue
            idle = now - last_progress
            hw = consumer.highwater(tp)
            suspicious = hw is not None and hw <= position
            if (suspicious and now >= next_check) or idle >= poll_timeout_s:
                next_check = now + _CHECK_INTERVAL_S
                resume = _after_gap(consumer, tp, rng, position, opts, out_of_range=False,
                                    past_end_ok=idle >= past_end_grace_s)
                if resume is not None:
                    position = resume
                    if position < until:
                        consumer.seek(tp, position)
                    last_progress = time.monotonic()
                    continue
                if idle >= poll_timeout_s:
                    raise Errors.KafkaTimeoutError(
                        f"reading {rng.topic}-{rng.partition}: no progress at offset {position} for "
                        f"{opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) while reading up to offset "
                        f"{until - 1}; the broker may be unreachable or overloaded (raise "
                        f"kafkaConsumer.pollTimeoutMs to wait longer)")


def _rows_before(chunk: Any, until: int, columnar: bool) -> int:
    """How many leading rows of chunk have offsets below until."""
    n = len(chunk)
    if columnar:
        if chunk.last_offset < until:
            return n
        import numpy as np
        offsets = np.frombuffer(chunk.offsets, dtype=np.int64)
        return int(np.searchsorted(offsets, until, side="left"))
    if chunk[-1].offset < until:
        return n
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if chunk[mid].offset < until:
            lo = mid + 1
        else:
            hi = mid
    return lo


def read_offset_range(offset_range: Any, options: Mapping[str, Any] | SourceOptions) -> Iterator:
    """The records of one planned range, in offset order (kclient ConsumerRecord objects)."""
    rng = as_offset_range(offset_range)
    opts = parse_options(options)
    for chunk, n in _chunks(rng, opts, columnar=False):
        if n == len(chunk):
            yield from chunk
        else:
            yield from chunk[:n]


def read_offset_ranges(ranges: Iterable[Any], options: Mapping[str, Any] | SourceOptions) -> Iterator:
    """Records of several ranges one after the other (e.g. a ``mapPartitions`` over a
    DataFrame or RDD of ranges)."""
    opts = parse_options(options)
    for value in ranges:
        yield from read_offset_range(value, opts)


def _timestamp(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def range_rows(ranges: Iterable[Any], options: Mapping[str, Any] | SourceOptions) -> Iterator[tuple]:
    """Rows in the Spark Kafka source's column order (key, value, topic, partition, offset,
    timestamp, timestampType[, headers]) for ``mapPartitions`` + ``createDataFrame`` with
    ``kclient.spark.kafka_schema()``. Headers are None when a record has none (as in Spark)."""
    opts = parse_options(options)
    headers_on = opts.include_headers
    ts = _timestamp
    for value in ranges:
        for r in read_offset_range(value, opts):
            row: tuple[Any, ...] = (r.key, r.value, r.topic, r.partition, r.offset, ts(r.timestamp), r.timestamp_type)
            if headers_on:
                row += ([tuple(h) for h in r.headers] if r.headers else None,)
            yield row

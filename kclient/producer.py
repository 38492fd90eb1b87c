"""A small Kafka producer: enough for tests, benchmarks, demos and users' tooling.

``KafkaProducer`` takes kafka-python's keywords (or Java-style dotted keys) and keeps its
call shapes: ``send(topic, value, key, headers, partition, timestamp_ms)`` returns a future
whose ``get(timeout)`` gives a ``RecordMetadata``; ``flush()``; ``close()``.

How it differs from kafka-python's and Java's producer, on purpose (it is *small*):

* No background thread. The network is driven from the calling thread inside ``send()``
  (without blocking, unless ``buffer.memory`` is full or metadata is missing; with
  ``linger.ms`` > 0 at most once a millisecond unless a batch has just filled, so records
  sent in between join the open batch as they would while Java's sender thread is busy;
  with ``linger.ms`` = 0 on every send, so each record leaves at once), ``flush()``,
  ``close()``, ``poll()`` and a future's ``get()``. An application that sends and then
  waits a long time without calling any of them leaves records lingering: call
  ``flush()`` (or ``poll()``) at the points where delivery must have happened.
* Records are batched per partition (``batch.size``, ``linger.ms``), one batch per partition
  per Produce request, several requests in flight per connection
  (``max.in.flight.requests.per.connection``): a retried batch may overtake a later one
  (as in Java without idempotence). With ``max.in.flight.requests.per.connection=1`` a
  partition has at most one batch in flight, across leader changes too, so its records land
  in the order sent (Java's guarantee). No idempotence, no transactions.
* Keyed records go to ``murmur2(key) & 0x7fffffff % partitions`` (Java's default
  partitioner); records without a key stick to one partition until its batch is sent
  (Java's sticky partitioner).

Thread-safe: one lock serialises every call.
"""
from __future__ import annotations

import collections
import logging
import random
import threading
import weakref
from collections import namedtuple
from typing import Any, Callable, Mapping, NamedTuple

from kcore.records import RecordBatchBuilder, decode_records

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.config import CODECS, PRODUCER_CONFIGS, ClientSettings, ProducerConfig
from kclient.consumer.deserializers import as_serializer, close_plugins
from kclient.network.future import RequestFuture
from kclient.network.network_client import ClientRequest, NetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.structs import TopicPartition
from kclient.protocol import ApiKey

__all__ = ["KafkaProducer", "RecordMetadata", "FutureRecordMetadata", "murmur2",
           "default_partitioner", "ProducerConfig", "PRODUCER_CONFIGS", "ClientSettings"]

log = logging.getLogger(__name__)

PRODUCE_KEY = int(ApiKey.PRODUCE)
_TOPIC_ID_VERSION = 13       # Produce v13+ names topics by id

RecordMetadata = namedtuple(
    "RecordMetadata",
    ["topic", "partition", "topic_partition", "offset", "timestamp", "log_start_offset",
     "checksum", "serialized_key_size", "serialized_value_size", "serialized_header_size"],
)
RecordMetadata.__doc__ = """Where a sent record landed (kafka-python's fields). offset is -1
with acks=0 (the broker does not answer); timestamp is the broker's LogAppendTime when the
topic uses it, else the record's CreateTime."""

# ------------------------------------------------------------------ partitioning
def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2) as a signed int32."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def default_partitioner(key: bytes, all_partitions: list[int], available: list[int]) -> int:
    """Java's choice for keyed records: murmur2(key) made positive, modulo the partition count."""
    return all_partitions[(murmur2(key) & 0x7FFFFFFF) % len(all_partitions)]


class _ClusterView:
    """What kafka-python 3 partitioners read from their ``cluster`` argument."""

    def __init__(self, cluster):
        self._cluster = cluster

    def topics(self) -> set[str]:
        return set(self._cluster.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = self._cluster.partitions_for_topic(topic)
        return None if parts is None else {p.partition for p in parts}

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return {p.partition for p in self._cluster.available_partitions_for_topic(topic)}


# ------------------------------------------------------------------ futures
class FutureRecordMetadata(RequestFuture):
    """The future of one sent record. ``get(timeout)`` drives the producer's network until
    the record is acknowledged (the producer has no background thread)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: "KafkaProducer"):
        shared = getattr(producer, "_future_shared", None)
        if shared is None:
            super().__init__()
            self._producer = weakref.ref(producer)
            return
        # The futures of one producer share one weak reference to it and one lock: a lock and
        # a weakref of its own cost each record about a µs. One lock serves them all because a
        # RequestFuture holds its lock only to read or change its own state, never while it
        # calls out (listeners run after it is released).
        # Weak: the producer holds its pending futures, and a strong reference back would make
        # a cycle, so a producer dropped without close() would wait for the cyclic GC (maybe
        # for ever) instead of delivering its records in __del__ at once, as kafka-python's
        # background sender does. A dropped producer's close() settles all its futures.
        ref, lock = shared
        super().__init__(lock)
        self._producer = ref

    @staticmethod
    def _succeed_all(futures: list, tp: TopicPartition, base_offset: int, append_time: int | None,
                     log_start_offset: int) -> None:
        """Complete a batch's [(future, timestamp, key size, value size, header size)] of one
        producer: the futures nobody listens to or waits for under one hold of their shared
        lock, the others through complete() once it is released."""
        if not futures:
            return
        topic, partition = tp
        RequestFuture.complete_all(
            [(fut, RecordMetadata(topic, partition, tp, base_offset + i if base_offset >= 0 else -1,
                                  append_time or ts, log_start_offset, None, ks, vs, hs))
             for i, (fut, ts, ks, vs, hs) in enumerate(futures) if not fut.is_done])

    def get(self, timeout: float | None = None) -> RecordMetadata:
        if not self.is_done:
            producer = self._producer()
            if producer is None:    # not reached: close() settled every future first
                raise Errors.IllegalStateError("the producer of this record is gone")
            producer._drive_until(lambda: self.is_done, None if timeout is None else timeout * 1000)
        if not self.is_done:
            raise Errors.KafkaTimeoutError(f"record not acknowledged within {timeout} s")
        if self.failed():
            raise self.exception
        return self.value

    # kafka-python's names
    def add_callback(self, fn: Callable[..., Any], *args: Any) -> "FutureRecordMetadata":
        self.on_success(fn, *args)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any) -> "FutureRecordMetadata":
        self.on_failure(fn, *args)
        return self


class _Batch:
    """Records for one partition, encoded as they are appended (RecordBatchBuilder)."""

    __slots__ = ("tp", "builder", "futures", "created_ms", "attempts", "payload", "retry_at_ms",
                 "bytes", "closed")

    def __init__(self, tp: TopicPartition, now_ms: int):
        self.tp = tp
        self.builder = RecordBatchBuilder()
        self.futures: list[tuple] = []
        self.created_ms = now_ms
        self.attempts = 0
        self.payload: bytes | None = None
        self.retry_at_ms = 0
        self.bytes = 0
        self.closed = False

    def close(self, codec: int, level: int | None) -> None:
        self.payload = self.builder.build(codec=codec, compression_level=level)
        del self.builder  # frees its buffer; a closed batch is read through payload only
        self.closed = True

    def fail(self, exc: BaseException) -> None:
        for fut, *_ in self.futures:
            if not fut.is_done:
                fut.raise_(exc)

    def succeed(self, base_offset: int, log_append_time: int, log_start_offset: int) -> None:
        # -1 means CreateTime; librdkafka's mock cluster sends 0 for it, also not a real append time.
        append_time = log_append_time if log_append_time is not None and log_append_time > 0 else None
        FutureRecordMetadata._succeed_all(self.futures, self.tp, base_offset, append_time, log_start_offset)


class _TopicParts(NamedTuple):
    """A topic's partitions in one metadata snapshot, as send() needs them."""
    topic: str
    cluster: Any                          # the snapshot these were read from
    all_ids: list[int]
    available: list[int]                  # with a leader (all of them if none has one)
    tps: dict[int, TopicPartition]        # one shared TopicPartition per partition


# Keys whose murmur2 hash send() remembers: applications reuse keys (user or device ids), and
# the pure-Python hash costs several µs per record; the cache is dropped whole when full.
_KEY_HASH_CACHE = 65536


# ------------------------------------------------------------------ producer
class KafkaProducer:
    """A small, synchronous-network producer with kafka-python's interface (see module doc)."""

    def __init__(self, configs: Mapping[str, Any] | None = None, *, clock: Clock | None = None,
                 **kwargs: Any):
        self.config = ProducerConfig(configs, **kwargs)
        cfg = self.config
        self._clock = clock or SYSTEM_CLOCK
        self._client = NetworkClient(NetworkClientConfig.of(cfg), clock=self._clock,
                                     max_response_bytes=cfg["receive.message.max.bytes"])
        self._metadata = self._client.metadata
        self._lock = threading.RLock()
        self._acks = cfg["acks"]
        self._linger_ms = cfg["linger.ms"]
        self._batch_size = max(cfg["batch.size"], 1)
        self._codec = CODECS[cfg["compression.type"]]
        self._level = cfg["compression.level"]
        self._max_request_size = cfg["max.request.size"]
        self._buffer_memory = cfg["buffer.memory"]
        self._key_serializer = as_serializer(cfg["key.serializer"])
        self._value_serializer = as_serializer(cfg["value.serializer"])
        # Called with key None for keyless records when the user supplied the partitioner.
        self._partitioner: Callable[[Any, list[int], list[int]], int] = cfg["partitioner"] or default_partitioner
        self._ignore_keys = cfg["partitioner.ignore.keys"]
        self._request_timeout_ms = cfg["request.timeout.ms"]
        self._retries = cfg["retries"]
        self._retry_backoff_ms = cfg["retry.backoff.ms"]
        self._delivery_timeout_ms = cfg["delivery.timeout.ms"]
        self._max_block_ms = cfg["max.block.ms"]
        self._open: dict[TopicPartition, _Batch] = {}
        self._queued: dict[TopicPartition, collections.deque] = {}
        self._in_flight = 0                   # Produce requests awaiting an answer
        # max.in.flight.requests.per.connection=1 promises order: a partition with a batch in
        # flight sends nothing more until it is answered, even to another (new) leader.
        self._keep_order = cfg["max.in.flight.requests.per.connection"] == 1
        self._muted: set[TopicPartition] = set()
        self._buffered_bytes = 0
        self._sticky: dict[str, int] = {}
        self._rng = random.Random()
        self._closed = False
        self._metrics: collections.Counter[str] = collections.Counter()
        # With linger.ms > 0, send() drives the network at most once per ms unless a batch
        # filled: a network round per record cost ~25 µs of CPU each. With linger.ms = 0 every
        # send() runs one, because a user who asked for no lingering expects the record to
        # leave now even if this producer is never called again.
        self._next_io_ms = 0
        self._batch_closed = False
        # The send() hot path: per topic, the partitions of the current metadata snapshot
        # (see _partition); per key, its murmur2 hash; a counter instead of a Counter update.
        self._topic_parts: dict[str, _TopicParts] = {}
        self._key_hashes: dict[bytes, int] = {}
        self._records_sent = 0
        self._future_shared = (weakref.ref(self), threading.Lock())    # see FutureRecordMetadata
        log.debug("producer created: %r", dict(cfg))

    # ------------------------------------------------------------------ public API
    def send(self, topic: str, value: Any = None, key: Any = None, headers: list | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a future of its RecordMetadata (see module doc for when
        the network actually runs)."""
        if type(topic) is not str or not topic:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        with self._lock:
            if self._closed:
                raise Errors.IllegalStateError("cannot send: the producer is closed")
            hsize = -1
            if headers:
                if type(headers) is not list:
                    headers = [(k, v) for k, v in headers]
                hsize = 0
                for k, v in headers:
                    if not isinstance(k, str):
                        raise TypeError(f"header keys must be str, got {k!r}")
                    hsize += len(k.encode()) + (len(v) if v is not None else 0)
            # bytes (or None) without a serializer, the common case, skips the generic path.
            if self._key_serializer is None and (key is None or type(key) is bytes):
                kbytes = key
            else:
                kbytes = self._serialize(self._key_serializer, topic, headers or [], key, "key")
            if self._value_serializer is None and (value is None or type(value) is bytes):
                vbytes = value
            else:
                vbytes = self._serialize(self._value_serializer, topic, headers or [], value, "value")
            now = self._clock.now_ms()
            parts = self._topic_parts.get(topic)
            if parts is None or parts.cluster is not self._metadata.cluster:
                parts = self._topic_partitions(topic)
            tp = self._partition(parts, partition, kbytes, key, value, vbytes)
            ts = self._clock.wall_ms() if timestamp_ms is None else int(timestamp_ms)
            future = FutureRecordMetadata(self)
            self._append(tp, ts, kbytes, vbytes, headers, future, now, hsize)
            self._records_sent += 1
            if self._buffered_bytes > self._buffer_memory:
                self._drive_until(lambda: self._buffered_bytes <= self._buffer_memory,
                                  self._max_block_ms, what="buffer.memory to free up")
            elif self._batch_closed or now >= self._next_io_ms or self._linger_ms == 0:
                self._batch_closed = False
                self._run_once(0, now)
                self._next_io_ms = now + 1
            return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait for every answer (``timeout`` in seconds)."""
        with self._lock:
            self._drive_until(self._all_done, None if timeout is None else timeout * 1000,
                              flush=True, what="flush")

    def poll(self, timeout_ms: int = 0) -> None:
        """Do pending network work for up to ``timeout_ms`` (sends due batches, reads answers)."""
        with self._lock:
            self._run_once(timeout_ms, self._clock.now_ms())

    def close(self, timeout: float | None = None, null_logger: bool = False) -> None:
        """Flush (waiting up to ``timeout`` seconds), then close the connections; records not
        delivered by then fail."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush(timeout)
            except Errors.KafkaTimeoutError as exc:
                log.warning("closing the producer with undelivered records: %s", exc)
            finally:
                self._closed = True
                self._fail_all(Errors.KafkaTimeoutError("the producer was closed before the record was delivered"))
                self._client.close()
                close_plugins(self.config["key.serializer"], self.config["value.serializer"], method="serialize")

    def partitions_for(self, topic: str) -> set[int]:
        """Partition ids of ``topic`` (waits for its metadata up to max.block.ms)."""
        with self._lock:
            self._wait_for_topic(topic, self._max_block_ms)
            parts = self._metadata.cluster.partitions_for_topic(topic)
            assert parts is not None  # _wait_for_topic() returns only once the topic has partitions
            return {p.partition for p in parts}

    def bootstrap_connected(self) -> bool:
        return self._client.ever_connected()

    def metrics(self, raw: bool = False) -> dict:
        with self._lock:
            metrics = dict(self._metrics)
            if self._records_sent:
                metrics["record-send-total"] = self._records_sent
            return {"producer-metrics": metrics}

    def __enter__(self) -> "KafkaProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # Dropped without close(): deliver what is queued (briefly), as kafka-python's
        # background sender would, and do not leak sockets.
        try:
            if not self._closed:
                self.close(timeout=5)
        except Exception:
            pass

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _serialize(serializer, topic: str, headers, obj: Any, what: str) -> bytes | None:
        if serializer is not None:
            obj = serializer(topic, headers, obj)
        if obj is None:
            return None
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(f"the {what} must be bytes (or set {what}_serializer), got {type(obj).__name__}")

    def _wait_for_topic(self, topic: str, max_ms: int) -> None:
        if self._metadata.cluster.partitions_for_topic(topic):
            return
        self._metadata.add_topics(topic)

        def known() -> bool:
            # Metadata that cannot come because the login fails: that failure, not a timeout.
            self._client.maybe_raise_authentication_error()
            return bool(self._metadata.cluster.partitions_for_topic(topic))
        self._drive_until(known, max_ms, what=f"metadata of topic {topic!r}")

    def _topic_partitions(self, topic: str) -> "_TopicParts":
        """The partitions of topic in the current metadata snapshot (waits for its metadata
        up to max.block.ms). Cached per snapshot: a metadata update replaces the snapshot."""
        cluster = self._metadata.cluster
        cached = self._topic_parts.get(topic)
        if cached is not None and cached.cluster is cluster:
            return cached
        self._wait_for_topic(topic, self._max_block_ms)
        cluster = self._metadata.cluster
        parts = cluster.partitions_for_topic(topic)
        assert parts is not None  # _wait_for_topic() returns only once the topic has partitions
        all_ids = [p.partition for p in parts]
        entry = _TopicParts(topic, cluster, all_ids, [p.partition for p in parts if p.leader >= 0] or all_ids,
                            {i: TopicPartition(topic, i) for i in all_ids})
        self._topic_parts[topic] = entry
        return entry

    def _partition(self, parts: _TopicParts, partition: int | None, key: bytes | None,
                   raw_key: Any = None, raw_value: Any = None, value: bytes | None = None) -> TopicPartition:
        topic = parts.topic
        all_ids = parts.all_ids
        if partition is not None:
            if not isinstance(partition, int) or isinstance(partition, bool) or partition not in parts.tps:
                raise Errors.IllegalArgumentError(
                    f"partition {partition!r} is not one of topic {topic!r}'s partitions {all_ids}")
            return parts.tps[partition]
        partitioner = self._partitioner
        if partitioner is default_partitioner:
            if key is not None and not self._ignore_keys:
                h = self._key_hashes.get(key)
                if h is None:
                    if len(self._key_hashes) >= _KEY_HASH_CACHE:
                        self._key_hashes.clear()
                    h = self._key_hashes[key] = murmur2(key) & 0x7FFFFFFF
                return parts.tps[all_ids[h % len(all_ids)]]
            sticky = self._sticky.get(topic)
            if sticky is None or sticky not in parts.tps:
                sticky = self._rng.choice(parts.available)
                self._sticky[topic] = sticky
            return parts.tps[sticky]
        custom = getattr(partitioner, "partition", None)
        if callable(custom):  # a kafka-python 3 Partitioner object
            chosen = custom(topic, raw_key, None if self._ignore_keys else key, raw_value, value,
                            _ClusterView(self._metadata.cluster))
        else:
            # Called with key None for keyless records (and with partitioner.ignore.keys).
            chosen = partitioner(None if key is None or self._ignore_keys else key, all_ids, parts.available)
        return parts.tps.get(chosen) or TopicPartition(topic, chosen)

    def _next_sticky(self, topic: str, old: int) -> None:
        parts = self._metadata.cluster.available_partitions_for_topic(topic)
        ids = [p.partition for p in parts if p.partition != old]
        if ids:
            self._sticky[topic] = self._rng.choice(ids)

    def _append(self, tp, ts, key, value, headers, future, now, hsize) -> None:
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = _Batch(tp, now)
        elif len(batch.builder) and batch.builder.size_in_bytes >= self._batch_size:
            self._close_batch(batch)
            batch = self._open[tp] = _Batch(tp, now)
        builder = batch.builder
        size = builder.append(ts, key, value, headers)
        batch_bytes = builder.size_in_bytes
        if batch_bytes > self._max_request_size:
            if len(builder) > 1:
                # The record would make the batch too large: it opens the next one.
                self._close_batch_without_last(batch, tp, ts, key, value, headers, now)
                batch = self._open[tp]
                batch_bytes = batch.builder.size_in_bytes
            else:
                del self._open[tp]
                exc = Errors.MessageTooLargeError(
                    f"record of {size} bytes exceeds max.request.size ({self._max_request_size})")
                future.raise_(exc)
                return
        batch.futures.append((future, ts, -1 if key is None else len(key),
                              -1 if value is None else len(value), hsize))
        batch.bytes += size
        self._buffered_bytes += size
        if batch_bytes >= self._batch_size:
            self._close_batch(batch)

    def _close_batch_without_last(self, batch, tp, ts, key, value, headers, now) -> None:
        # Rebuild the batch without its last record (rare: only when max.request.size binds).
        old_payload = batch.builder.build()
        recs = decode_records(old_payload).records[:-1]
        fresh = RecordBatchBuilder()
        for r in recs:
            fresh.append(r.timestamp, r.key, r.value, r.headers or None)
        batch.builder = fresh
        self._close_batch(batch)
        nb = self._open[tp] = _Batch(tp, now)
        nb.builder.append(ts, key, value, headers)

    def _close_batch(self, batch: _Batch) -> None:
        if batch.closed:
            return
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        batch.close(self._codec, self._level)
        self._queued.setdefault(batch.tp, collections.deque()).append(batch)
        self._batch_closed = True
        if self._sticky.get(batch.tp.topic) == batch.tp.partition:
            self._next_sticky(batch.tp.topic, batch.tp.partition)

    def _all_done(self) -> bool:
        return not self._open and not any(self._queued.values()) and self._in_flight == 0

    def _fail_all(self, exc: BaseException) -> None:
        for batch in list(self._open.values()):
            batch.fail(exc)
        self._open.clear()
        for q in self._queued.values():
            for batch in q:
                batch.fail(exc)
            q.clear()
        self._buffered_bytes = 0

    # ------------------------------------------------------------------ network driving
    def _drive_until(self, done: Callable[[], bool], timeout_ms: float | None, *, flush: bool = False,
                     what: str = "the record to be acknowledged") -> None:
        with self._lock:
            deadline = None if timeout_ms is None else self._clock.now_ms() + int(timeout_ms)
            while not done():
                if self._closed and not flush:
                    raise Errors.IllegalStateError("the producer is closed")
                now = self._clock.now_ms()
                if deadline is not None and timeout_ms is not None and now >= deadline:
                    raise Errors.KafkaTimeoutError(f"timed out after {int(timeout_ms)} ms waiting for {what}")
                wait = 100 if deadline is None else min(deadline - now, 100)
                self._run_once(wait, now, flush=flush)

    def _run_once(self, timeout_ms: int, now: int, flush: bool = False) -> None:
        """Send due batches to the connections that take them, then wait for I/O up to
        timeout_ms (less if a linger or retry backoff ends sooner)."""
        self._expire_batches(now)
        wait = self._send_ready(now, flush)
        self._client.poll(max(min(timeout_ms, wait), 0), now)

    def _expire_batches(self, now: int) -> None:
        for tp, q in self._queued.items():
            while q and now - q[0].created_ms >= self._delivery_timeout_ms:
                batch = q.popleft()
                self._buffered_bytes -= batch.bytes
                batch.fail(Errors.KafkaTimeoutError(
                    f"{len(batch.futures)} record(s) for {tp} expired: not delivered within "
                    f"delivery.timeout.ms ({self._delivery_timeout_ms} ms)"))

    def _head(self, tp: TopicPartition, now: int, flush: bool) -> _Batch | None:
        """The next batch to send for tp: a queued (full or retried) one, else the open
        batch once its linger has passed. The open batch keeps taking records until it is
        actually sent, so records batch up while the connections are busy."""
        q = self._queued.get(tp)
        if q:
            return q[0] if q[0].retry_at_ms <= now else None
        b = self._open.get(tp)
        if b is not None and (flush or now - b.created_ms >= self._linger_ms):
            return b
        return None

    def _take(self, tp: TopicPartition, batch: _Batch) -> None:
        if batch.closed:
            self._queued[tp].popleft()
        else:
            del self._open[tp]
            batch.close(self._codec, self._level)
            if self._sticky.get(tp.topic) == tp.partition:
                self._next_sticky(tp.topic, tp.partition)

    def _send_ready(self, now: int, flush: bool) -> int:
        """Send due batches to their leaders; ms until the next linger/backoff ends."""
        cluster = self._metadata.cluster
        by_node: dict[int, list[TopicPartition]] = {}
        wait = 2**31
        for tp in set(self._open) | {tp for tp, q in self._queued.items() if q}:
            if tp in self._muted:
                continue
            head = self._head(tp, now, flush)
            if head is None:
                q = self._queued.get(tp)
                if q:
                    wait = min(wait, q[0].retry_at_ms - now)
                elif tp in self._open:
                    wait = min(wait, self._open[tp].created_ms + self._linger_ms - now)
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                self._metadata.add_topics(tp.topic)
                self._metadata.request_update()
                continue
            by_node.setdefault(leader.node_id, []).append(tp)
        for node_id, tps in by_node.items():
            while tps and self._client.ready(node_id, now) and self._client.send_capacity(node_id) > 0:
                batches: list[_Batch] = []
                rest: list[TopicPartition] = []
                size = 0
                for tp in tps:
                    b = self._head(tp, now, flush)
                    if b is None:
                        continue
                    bsize = len(b.payload) if b.payload is not None else b.builder.size_in_bytes  # set by close()
                    if batches and size + bsize > self._max_request_size:
                        rest.append(tp)
                        continue
                    self._take(tp, b)
                    batches.append(b)
                    assert b.payload is not None  # _take() closed it
                    size += len(b.payload)
                    if not self._keep_order and self._head(tp, now, flush) is not None:
                        rest.append(tp)
                if not batches:
                    break
                self._send_produce(node_id, batches, now)
                tps = rest
        return max(wait, 0)

    def _send_produce(self, node_id: int, batches: list[_Batch], now: int) -> None:
        cluster = self._metadata.cluster
        version = self._client.api_version(node_id, PRODUCE_KEY)
        if version is None:
            for b in batches:
                self._finish_batch(b, Errors.UnsupportedVersionError(
                    f"node {node_id} does not support a Produce version this client implements"))
            return
        if version >= _TOPIC_ID_VERSION and any(cluster.topic_id(b.tp.topic) is None for b in batches):
            version = _TOPIC_ID_VERSION - 1
        if self._keep_order:
            self._muted.update(b.tp for b in batches)    # until on_complete
        by_topic: dict[str, list] = {}
        for b in batches:
            by_topic.setdefault(b.tp.topic, []).append({"index": b.tp.partition, "records": b.payload})
            b.attempts += 1
        topic_data = []
        ids = {}
        for topic, parts in by_topic.items():
            entry: dict[str, Any] = {"partition_data": parts}
            if version >= _TOPIC_ID_VERSION:
                tid = cluster.topic_id(topic)
                entry["topic_id"] = tid
                ids[tid] = topic
            else:
                entry["name"] = topic
            topic_data.append(entry)
        body = {"transactional_id": None, "acks": self._acks, "timeout_ms": self._request_timeout_ms,
                "topic_data": topic_data}
        by_tp = {b.tp: b for b in batches}

        def on_complete(response, error):
            self._in_flight -= 1
            self._muted.difference_update(by_tp)
            self._handle_produce_response(by_tp, ids, response, error, node_id)

        request = ClientRequest(node_id, PRODUCE_KEY, body, on_complete, version,
                                self._request_timeout_ms, created_ms=now)
        self._in_flight += 1
        self._metrics["request-total"] += 1
        self._client.send(request, now)
        if self._acks == 0 and request.correlation_id >= 0:
            # No answer will come: take the request out of the in-flight queue (so the next
            # response matches the next request) and count the batches as delivered.
            try:
                popped = self._client._in_flight.complete_last_unanswered(node_id)
            except Errors.KafkaError:
                return  # the connection failed while sending; the callback reported it
            if popped is request:
                on_complete({"responses": []}, None)

    def _finish_batch(self, batch: _Batch, exc: BaseException | None, base_offset: int = -1,
                      append_time: int = -1, log_start: int = -1) -> None:
        self._buffered_bytes -= batch.bytes
        if exc is not None:
            batch.fail(exc)
        else:
            batch.succeed(base_offset, append_time, log_start)

    def _retry(self, batch: _Batch, exc: BaseException) -> bool:
        now = self._clock.now_ms()
        if (batch.attempts > self._retries or now - batch.created_ms >= self._delivery_timeout_ms
                or not getattr(exc, "retriable", False) or self._closed):
            return False
        log.debug("retrying batch for %s after %s (attempt %d)", batch.tp, exc, batch.attempts)
        batch.retry_at_ms = now + self._retry_backoff_ms
        self._queued.setdefault(batch.tp, collections.deque()).appendleft(batch)
        return True

    def _handle_produce_response(self, by_tp, ids, response, error, node_id) -> None:
        if error is not None:
            if getattr(error, "invalid_metadata", False):
                self._metadata.request_update()
            for b in by_tp.values():
                if not self._retry(b, error):
                    self._finish_batch(b, error)
            return
        seen = set()
        for t in response.get("responses") or []:
            topic = t.get("name") or ids.get(t.get("topic_id"))
            for p in t.get("partition_responses") or []:
                tp = TopicPartition(topic, p["index"])
                b = by_tp.get(tp)
                if b is None:
                    continue
                seen.add(tp)
                code = p.get("error_code", 0)
                if code:
                    cls = Errors.error_class(code)
                    msg = p.get("error_message") or None
                    exc = cls(f"{tp}: {msg}" if msg else f"producing to {tp} failed")
                    if cls.invalid_metadata:
                        self._metadata.request_update()
                    if not self._retry(b, exc):
                        self._finish_batch(b, exc)
                    continue
                self._finish_batch(b, None, p.get("base_offset", -1), p.get("log_append_time_ms", -1),
                                   p.get("log_start_offset", -1))
        for tp, b in by_tp.items():
            if tp not in seen:
                if self._acks == 0:
                    self._finish_batch(b, None)
                else:
                    self._finish_batch(b, Errors.KafkaError(f"the Produce response from node {node_id} omitted {tp}"))

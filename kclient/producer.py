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
from typing import TYPE_CHECKING, Any, Callable, Mapping

from kcore.accumulator import ProducerBatch, RecordAccumulator, RecordFuture, TopicState
from kcore.accumulator import murmur2 as murmur2

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.config import CODECS, PRODUCER_CONFIGS, ClientSettings, ProducerConfig
from kclient.consumer.deserializers import as_serializer, close_plugins
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
# murmur2 (Kafka's hash of keys, Java's Utils.murmur2 as a signed int32) is kcore's.

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
# The future of one sent record (kafka-python's name): kcore's RecordFuture, whose state,
# RecordMetadata and listeners come from its batch's answer. get(timeout) drives the
# producer's network until the record is answered (the producer has no background thread).
if TYPE_CHECKING:
    FutureRecordMetadata = RecordFuture[RecordMetadata]
else:
    FutureRecordMetadata = RecordFuture


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
        self._in_flight = 0                   # Produce requests awaiting an answer
        # max.in.flight.requests.per.connection=1 promises order: a partition with a batch in
        # flight sends nothing more until it is answered, even to another (new) leader.
        self._keep_order = cfg["max.in.flight.requests.per.connection"] == 1
        self._muted: set[TopicPartition] = set()
        self._rng = random.Random()
        self._closed = False
        self._metrics: collections.Counter[str] = collections.Counter()
        # The open batches (one per partition), the closed ones waiting to be sent, and
        # send()'s common case (the default partitioner) in compiled code.
        # With linger.ms > 0, send() drives the network at most once per ms unless a batch
        # filled: a network round per record cost ~25 µs of CPU each. With linger.ms = 0 every
        # send() runs one, because a user who asked for no lingering expects the record to
        # leave now even if this producer is never called again.
        self._acc = RecordAccumulator(
            owner=weakref.ref(self), lock=self._lock, cluster=self._metadata.cluster,
            clock=None if type(self._clock) is Clock else self._clock, metadata_type=RecordMetadata,
            too_large=Errors.MessageTooLargeError, rng=self._rng, batch_size=self._batch_size,
            max_request_size=self._max_request_size, buffer_memory=self._buffer_memory,
            linger_ms=self._linger_ms, codec=self._codec, level=self._level,
            fast=self._partitioner is default_partitioner, ignore_keys=bool(self._ignore_keys),
            key_serializer=self._key_serializer, value_serializer=self._value_serializer, log=log)
        # The fast path trusts a topic's cached partitions while the snapshot they came from
        # is current (the accumulator, not the producer, listens: no cycle through metadata).
        self._metadata.add_listener(self._acc.set_cluster)
        if type(self).send is KafkaProducer.send:
            # The compiled send() itself, without a Python call in front of it (a subclass
            # that overrides send() keeps its own).
            self.send = self._acc.send  # type: ignore[method-assign]
        log.debug("producer created: %r", dict(cfg))

    # ------------------------------------------------------------------ public API
    def send(self, topic: str, value: Any = None, key: Any = None, headers: list | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a future of its RecordMetadata (see module doc for when
        the network actually runs)."""
        return self._acc.send(topic, value, key, headers, partition, timestamp_ms)

    def _send_slow(self, topic: str, value: Any, key: Any, headers: Any, partition: Any,
                   timestamp_ms: Any) -> FutureRecordMetadata:
        """send() for what the compiled path does not take: a custom partitioner, a topic
        without current metadata, arguments of other types."""
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
            if self._key_serializer is None and (key is None or type(key) is bytes):
                kbytes = key
            else:
                kbytes = self._serialize(self._key_serializer, topic, headers or [], key, "key")
            if self._value_serializer is None and (value is None or type(value) is bytes):
                vbytes = value
            else:
                vbytes = self._serialize(self._value_serializer, topic, headers or [], value, "value")
            now = self._clock.now_ms()
            state = self._acc.topic_state(topic) or self._topic_partitions(topic)
            tp = self._partition(state, partition, kbytes, key, value, vbytes)
            ts = self._clock.wall_ms() if timestamp_ms is None else int(timestamp_ms)
            future = self._acc.append(tp, ts, kbytes, vbytes, headers, hsize, now)
            self._after_send(now)
            return future

    def _wait_for_record(self, future: FutureRecordMetadata, timeout: float | None, raise_timeout: bool) -> None:
        """Drive the network until future is answered (a future's get() and wait())."""
        try:
            self._drive_until(lambda: future.is_done, None if timeout is None else timeout * 1000)
        except Errors.KafkaTimeoutError:
            if raise_timeout:
                raise
        if raise_timeout and not future.is_done:
            raise Errors.KafkaTimeoutError(f"record not acknowledged within {timeout} s")

    def _after_send(self, now: int) -> None:
        """The network step after an append: blocking while buffer.memory is full, else a
        non-blocking round when due (see __init__)."""
        acc = self._acc
        if acc.buffered_bytes > self._buffer_memory:
            self._drive_until(lambda: acc.buffered_bytes <= self._buffer_memory,
                              self._max_block_ms, what="buffer.memory to free up")
        elif acc.batch_closed or now >= acc.next_io_ms or self._linger_ms == 0:
            acc.batch_closed = False
            self._run_once(0, now)
            acc.next_io_ms = now + 1
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
                self._acc.closed = True
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
            if self._acc.records_sent:
                metrics["record-send-total"] = self._acc.records_sent
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

    def _topic_partitions(self, topic: str) -> TopicState:
        """The partitions of topic in the current metadata snapshot (waits for its metadata
        up to max.block.ms). Cached per snapshot: a metadata update replaces the snapshot."""
        cached = self._acc.topic_state(topic)
        if cached is not None:
            return cached
        self._wait_for_topic(topic, self._max_block_ms)
        cluster = self._metadata.cluster
        parts = cluster.partitions_for_topic(topic)
        assert parts is not None  # _wait_for_topic() returns only once the topic has partitions
        all_ids = [p.partition for p in parts]
        return self._acc.set_topic(topic, cluster, all_ids, [p.partition for p in parts if p.leader >= 0],
                                   {i: TopicPartition(topic, i) for i in all_ids})

    def _partition(self, state: TopicState, partition: int | None, key: bytes | None,
                   raw_key: Any = None, raw_value: Any = None, value: bytes | None = None) -> TopicPartition:
        topic = state.topic
        all_ids = state.all_ids
        if partition is not None:
            if not isinstance(partition, int) or isinstance(partition, bool) or partition not in state.tps:
                raise Errors.IllegalArgumentError(
                    f"partition {partition!r} is not one of topic {topic!r}'s partitions {all_ids}")
            return state.tps[partition]
        partitioner = self._partitioner
        if partitioner is default_partitioner:
            if key is not None and not self._ignore_keys:
                return state.tps[all_ids[(murmur2(key) & 0x7FFFFFFF) % len(all_ids)]]
            return state.tps[self._acc.sticky_position(state)]
        custom = getattr(partitioner, "partition", None)
        if callable(custom):  # a kafka-python 3 Partitioner object
            chosen = custom(topic, raw_key, None if self._ignore_keys else key, raw_value, value,
                            _ClusterView(self._metadata.cluster))
        else:
            # Called with key None for keyless records (and with partitioner.ignore.keys).
            chosen = partitioner(None if key is None or self._ignore_keys else key, all_ids, state.available)
        return state.tps.get(chosen) or TopicPartition(topic, chosen)

    def _all_done(self) -> bool:
        acc = self._acc
        return not acc.open and not any(acc.queued.values()) and self._in_flight == 0

    def _fail_all(self, exc: BaseException) -> None:
        self._acc.fail_all(exc)

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
        for tp, q in self._acc.queued.items():
            while q and now - q[0].created_ms >= self._delivery_timeout_ms:
                batch = q.popleft()
                self._acc.buffered_bytes -= batch.record_bytes
                batch.fail(Errors.KafkaTimeoutError(
                    f"{len(batch)} record(s) for {tp} expired: not delivered within "
                    f"delivery.timeout.ms ({self._delivery_timeout_ms} ms)"))

    def _head(self, tp: TopicPartition, now: int, flush: bool) -> ProducerBatch | None:
        """The next batch to send for tp: a queued (full or retried) one, else the open
        batch once its linger has passed. The open batch keeps taking records until it is
        actually sent, so records batch up while the connections are busy."""
        q = self._acc.queued.get(tp)
        if q:
            return q[0] if q[0].retry_at_ms <= now else None
        b = self._acc.open.get(tp)
        if b is not None and (flush or now - b.created_ms >= self._linger_ms):
            return b
        return None

    def _take(self, tp: TopicPartition, batch: ProducerBatch) -> None:
        if batch.closed:
            self._acc.queued[tp].popleft()
        else:
            self._acc.take_open(tp)

    def _send_ready(self, now: int, flush: bool) -> int:
        """Send due batches to their leaders; ms until the next linger/backoff ends."""
        cluster = self._metadata.cluster
        by_node: dict[int, list[TopicPartition]] = {}
        wait = 2**31
        for tp in set(self._acc.open) | {tp for tp, q in self._acc.queued.items() if q}:
            if tp in self._muted:
                continue
            head = self._head(tp, now, flush)
            if head is None:
                q = self._acc.queued.get(tp)
                if q:
                    wait = min(wait, q[0].retry_at_ms - now)
                elif tp in self._acc.open:
                    wait = min(wait, self._acc.open[tp].created_ms + self._linger_ms - now)
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                self._metadata.add_topics(tp.topic)
                self._metadata.request_update()
                continue
            by_node.setdefault(leader.node_id, []).append(tp)
        for node_id, tps in by_node.items():
            while tps and self._client.ready(node_id, now) and self._client.send_capacity(node_id) > 0:
                batches: list[ProducerBatch] = []
                rest: list[TopicPartition] = []
                size = 0
                for tp in tps:
                    b = self._head(tp, now, flush)
                    if b is None:
                        continue
                    bsize = b.size_in_bytes
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

    def _send_produce(self, node_id: int, batches: list[ProducerBatch], now: int) -> None:
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

    def _finish_batch(self, batch: ProducerBatch, exc: BaseException | None, base_offset: int = -1,
                      append_time: int = -1, log_start: int = -1) -> None:
        self._acc.buffered_bytes -= batch.record_bytes
        if exc is not None:
            batch.fail(exc)
        else:
            batch.succeed(base_offset, append_time, log_start)

    def _retry(self, batch: ProducerBatch, exc: BaseException) -> bool:
        now = self._clock.now_ms()
        if (batch.attempts > self._retries or now - batch.created_ms >= self._delivery_timeout_ms
                or not getattr(exc, "retriable", False) or self._closed):
            return False
        log.debug("retrying batch for %s after %s (attempt %d)", batch.tp, exc, batch.attempts)
        batch.retry_at_ms = now + self._retry_backoff_ms
        self._acc.queued.setdefault(batch.tp, collections.deque()).appendleft(batch)
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

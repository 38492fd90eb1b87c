# cython: language_level=3
"""The producer's record accumulator: a record goes from ``send()`` into the open batch of its
partition without Python work per record.

* ``RecordAccumulator.send`` is the whole common case of a producer's ``send()`` in C: checks,
  the serializers' calls, partition choice (murmur2 of the key, else the topic's sticky
  partition), the append into the open batch (kcore.builder's encoder), closing the batch by
  size, and the future. What it cannot do (a custom partitioner, unknown topics, odd argument
  types) it hands to the producer's ``_send_slow`` before changing anything.
* ``ProducerBatch`` keeps, besides the encoded records, each record's timestamp and key,
  value and header sizes in one C array, and the batch's answer (base offset, append time).
* ``RecordFuture`` is the future of one record: its batch and its position. Its
  ``RecordMetadata`` is made from the batch's answer only when somebody asks for it; the
  futures nobody listens to cost nothing when the batch completes.

Everything here runs under the producer's lock (``send`` takes it; the producer holds it
while it completes batches).
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.dict cimport PyDict_GetItem
from cpython.long cimport PyLong_AsLongLong
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport realloc, free

from kcore.builder cimport RecordBatchBuilder

import collections
import logging

from kcore.errors import IllegalStateError

__all__ = ["RecordAccumulator", "ProducerBatch", "RecordFuture", "TopicState", "murmur2"]

cdef object _deque = collections.deque
cdef object _log = logging.getLogger(__name__)

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_MONOTONIC
    int CLOCK_REALTIME

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL


cdef inline int64_t _ms(int clk):
    cdef timespec t
    clock_gettime(clk, &t)
    return <int64_t>t.tv_sec * 1000 + t.tv_nsec // 1000000


# ------------------------------------------------------------------ murmur2
cdef inline uint32_t _murmur2(const uint8_t* data, Py_ssize_t length) noexcept:
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = 0x9747B28C ^ <uint32_t>length
    cdef uint32_t k
    cdef Py_ssize_t i, n4 = length & ~3
    for i in range(0, n4, 4):
        k = (<uint32_t>data[i] | (<uint32_t>data[i + 1] << 8) | (<uint32_t>data[i + 2] << 16)
             | (<uint32_t>data[i + 3] << 24))
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    cdef Py_ssize_t rest = length & 3
    if rest == 3:
        h ^= <uint32_t>data[n4 + 2] << 16
    if rest >= 2:
        h ^= <uint32_t>data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(data) -> int:
    """Kafka's murmur2 hash (Java's Utils.murmur2) of a bytes-like value, as a signed int32."""
    cdef Py_buffer view
    if isinstance(data, str):
        raise TypeError("murmur2 hashes bytes, not str")
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return <int32_t>_murmur2(<const uint8_t*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


# ------------------------------------------------------------------ batches and futures
cdef enum:
    PENDING = 0
    SUCCEEDED = 1
    FAILED = 2

cdef enum:
    ON_SUCCESS = 1
    ON_FAILURE = 2
    ON_BOTH = 3
    LISTENER = 4      # an object with on_success(value) / on_failure(exc)


@cython.final
cdef class ProducerBatch:
    """The records of one partition: encoded as they are appended, then closed into a payload
    and sent (perhaps more than once); its answer completes the futures of its records."""

    def __cinit__(self, tp, int64_t created_ms, metadata_type=None, owner=None, log=None):
        self.tp = tp
        self.log = log if log is not None else _log
        self.builder = RecordBatchBuilder()
        self.created_ms = created_ms
        self.metadata_type = metadata_type
        self.owner = owner
        self.base_offset = -1
        self.append_time = -1
        self.log_start_offset = -1

    def __dealloc__(self):
        free(self.info)

    def __len__(self):
        return self.count

    @property
    def size_in_bytes(self) -> int:
        """The batch's size uncompressed (its payload's size once closed)."""
        if self.builder is None:
            return len(self.payload) if self.payload is not None else 0
        return self.builder.size_in_bytes

    @property
    def is_done(self) -> bool:
        return self.state != PENDING

    cdef Py_ssize_t _size(self):
        return self.builder.size_in_bytes

    cdef int _note(self, int64_t ts, int32_t ks, int32_t vs, int32_t hs) except -1:
        cdef Py_ssize_t cap
        cdef RecordInfo* grown
        if self.count == self.capacity:
            cap = 64 if self.capacity == 0 else self.capacity * 2
            grown = <RecordInfo*>realloc(self.info, cap * sizeof(RecordInfo))
            if grown == NULL:
                raise MemoryError()
            self.info = grown
            self.capacity = cap
        self.info[self.count].timestamp = ts
        self.info[self.count].key_size = ks
        self.info[self.count].value_size = vs
        self.info[self.count].header_size = hs
        self.count += 1
        return 0

    def append(self, int64_t timestamp_ms, key, value, headers=None, int32_t header_size=-1):
        """Encode one record into the batch; returns its encoded size."""
        if self.builder is None:
            raise IllegalStateError("the batch is closed")
        cdef Py_ssize_t size = self.builder.add(timestamp_ms, key, value, headers, 0, False)
        self._note(timestamp_ms, -1 if key is None else <int32_t>len(key),
                   -1 if value is None else <int32_t>len(value), header_size)
        self.record_bytes += size
        return size

    cdef void _drop_last(self, Py_ssize_t buf_len, int32_t count, int64_t base_ts, bint has_base_ts,
                         int64_t max_ts, int32_t last_delta) noexcept:
        """Undo the builder's last append (the fields as they were before it)."""
        cdef RecordBatchBuilder b = self.builder
        b._buf.len = buf_len
        b._count = count
        b._base_ts = base_ts
        b._has_base_ts = has_base_ts
        b._max_ts = max_ts
        b._last_delta = last_delta

    def close(self, int codec=0, compression_level=None):
        """Build the payload (compressed with codec) and free the encoder's buffer."""
        if self.closed:
            return
        if self.builder is None:
            raise IllegalStateError("the batch was answered before it was closed")
        self.payload = self.builder.build(codec=codec, compression_level=compression_level)
        self.builder = None
        self.closed = True

    def fail(self, exc):
        """Complete every record's future with exc (a batch completes once)."""
        if self.state != PENDING:
            return
        self.error = exc
        self.state = FAILED
        self._release()
        self._fire()

    def succeed(self, base_offset, log_append_time, log_start_offset):
        """Complete every record's future: record i is at base_offset + i (-1 with acks=0);
        its timestamp is log_append_time when the topic uses it, else its own."""
        if self.state != PENDING:
            return
        self.base_offset = base_offset if base_offset is not None else -1
        # -1 means CreateTime; librdkafka's mock cluster sends 0 for it, also not an append time.
        self.append_time = log_append_time if log_append_time is not None and log_append_time > 0 else -1
        self.log_start_offset = log_start_offset if log_start_offset is not None else -1
        self.state = SUCCEEDED
        self._release()
        self._fire()

    cdef void _release(self):
        # A completed batch is never sent again: its futures (which an application may keep
        # for long) hold only the per-record sizes, not the records' bytes.
        self.payload = None
        self.builder = None

    cdef object _metadata(self, Py_ssize_t i):
        cdef RecordInfo* r = &self.info[i]
        topic, partition = self.tp
        return self.metadata_type(
            topic, partition, self.tp, self.base_offset + i if self.base_offset >= 0 else -1,
            self.append_time if self.append_time > 0 else r.timestamp, self.log_start_offset, None,
            r.key_size, r.value_size, r.header_size)

    def metadata(self, Py_ssize_t index):
        """The RecordMetadata of record index of a succeeded batch."""
        if self.state != SUCCEEDED or not 0 <= index < self.count:
            raise IllegalStateError("no metadata: the batch has not succeeded or has no such record")
        return self._metadata(index)

    cdef void _fire(self):
        # The listened futures in record order, each one's listeners in the order added.
        cdef list listened = self.listened
        cdef RecordFuture fut
        self.listened = None
        if not listened:
            return
        if len(listened) > 1:
            listened.sort(key=_future_index)
        for fut in listened:
            fut._fire_all()


def _future_index(RecordFuture fut):
    return fut.index


cdef class RecordFuture:
    """The future of one sent record (kafka-python's FutureRecordMetadata interface). Its
    state is its batch's; listeners run once, in the order added, when the batch completes
    (at once when added to a completed future)."""

    @property
    def is_done(self) -> bool:
        return self.batch.state != PENDING

    def succeeded(self) -> bool:
        return self.batch.state == SUCCEEDED

    def failed(self) -> bool:
        return self.batch.state == FAILED

    def retriable(self) -> bool:
        return self.batch.state == FAILED and bool(getattr(self.batch.error, "retriable", False))

    @property
    def value(self):
        """The RecordMetadata of a succeeded record; IllegalStateError otherwise."""
        cdef ProducerBatch b = self.batch
        if b.state != SUCCEEDED:
            raise IllegalStateError(
                "the future has not completed successfully" if b.state == PENDING
                else f"the future failed: {b.error!r}")
        return b._metadata(self.index)

    @property
    def exception(self):
        """The exception of a failed record; IllegalStateError otherwise."""
        cdef ProducerBatch b = self.batch
        if b.state != FAILED:
            raise IllegalStateError("the future has not failed" if b.state == SUCCEEDED
                                    else "the future is not complete")
        return b.error

    cdef object _listen(self, int kind, object fn, tuple args):
        cdef ProducerBatch b = self.batch
        if b.state == PENDING:
            if self.listeners is None:
                self.listeners = []
                if b.listened is None:
                    b.listened = []
                b.listened.append(self)
            self.listeners.append((kind, fn, args))
        else:
            self._fire_one(kind, fn, args)
        return self

    cdef void _fire_all(self):
        listeners = self.listeners
        self.listeners = None
        if listeners:
            for kind, fn, args in listeners:
                self._fire_one(kind, fn, args)

    cdef void _fire_one(self, int kind, object fn, tuple args):
        # A failing listener must not stop the others nor escape into the network loop.
        cdef ProducerBatch b = self.batch
        try:
            if b.state == SUCCEEDED:
                if kind == LISTENER:
                    fn.on_success(b._metadata(self.index))
                elif kind & ON_SUCCESS:
                    fn(*args, b._metadata(self.index))
            elif kind == LISTENER:
                fn.on_failure(b.error)
            elif kind & ON_FAILURE:
                fn(*args, b.error)
        except Exception:
            b.log.exception("a listener of %r raised", self)

    def get(self, timeout=None):
        """The record's RecordMetadata, waiting up to timeout seconds (None: for ever) while
        driving the producer's network; raises the record's exception if it failed, or
        KafkaTimeoutError."""
        cdef ProducerBatch b = self.batch
        if b.state == PENDING:
            self._owner()._wait_for_record(self, timeout, True)
        if b.state == FAILED:
            raise b.error
        return b._metadata(self.index)

    def wait(self, timeout=None):
        """Drive the producer until the record is answered or timeout seconds pass; True if
        it was answered."""
        if self.batch.state == PENDING:
            self._owner()._wait_for_record(self, timeout, False)
        return self.batch.state != PENDING

    cdef object _owner(self):
        # Weak: the producer holds its pending batches; a strong reference back would make a
        # cycle, and a producer dropped without close() would wait for the cyclic GC instead
        # of delivering its records in __del__ at once. close() settles every future first.
        owner = self.batch.owner
        producer = owner() if owner is not None else None
        if producer is None:
            raise IllegalStateError("the producer of this record is gone")
        return producer

    def add_callback(self, fn, *args):
        """Call fn(*args, record_metadata) when the record is acknowledged."""
        return self._listen(ON_SUCCESS, fn, args)

    def add_errback(self, fn, *args):
        """Call fn(*args, exception) if the record fails."""
        return self._listen(ON_FAILURE, fn, args)

    def add_both(self, fn, *args):
        """Call fn(*args, metadata_or_exception) on either outcome."""
        return self._listen(ON_BOTH, fn, args)

    def on_success(self, fn, *args):
        return self._listen(ON_SUCCESS, fn, args)

    def on_failure(self, fn, *args):
        return self._listen(ON_FAILURE, fn, args)

    def add_listener(self, listener):
        """Register an object with on_success(value) and on_failure(exc)."""
        return self._listen(LISTENER, listener, ())

    def __repr__(self):
        cdef ProducerBatch b = self.batch
        if b.state == PENDING:
            return f"<{type(self).__name__} pending>"
        if b.state == SUCCEEDED:
            return f"<{type(self).__name__} value={b._metadata(self.index)!r}>"
        return f"<{type(self).__name__} exception={b.error!r}>"


# ------------------------------------------------------------------ the accumulator
cdef object _serialized(serializer, str topic, headers, obj, str what):
    """serializer(topic, headers, obj) as bytes or None (bytes-likes copied), else TypeError."""
    obj = serializer(topic, headers if headers is not None else [], obj)
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    raise TypeError(f"the {what} must be bytes (or set {what}_serializer), got {type(obj).__name__}")


@cython.final
cdef class TopicState:
    """A topic's partitions in one metadata snapshot, with its open batches and sticky
    partition (for records without a key)."""

    def __cinit__(self, str topic, cluster, list all_ids, list available, dict tps):
        self.topic = topic
        self.cluster = cluster
        self.all_ids = all_ids
        self.available = available or all_ids
        self.tps = tps
        self.tp_list = [tps[i] for i in all_ids]
        self.position = {pid: n for n, pid in enumerate(all_ids)}
        self.slots = [None] * len(all_ids)
        self.sticky = -1

    @property
    def sticky_partition(self):
        """The partition id keyless records go to now (None before the first)."""
        return None if self.sticky < 0 else self.all_ids[self.sticky]


@cython.final
cdef class RecordAccumulator:
    """A producer's open batches (one per partition), its closed ones waiting to be sent,
    buffered bytes, and send()'s fast path. The producer's network code reads and changes
    ``open`` and ``queued`` through the methods below."""

    def __cinit__(self, *, owner, lock, cluster, clock, metadata_type, too_large,
                  rng, Py_ssize_t batch_size, Py_ssize_t max_request_size, Py_ssize_t buffer_memory,
                  int64_t linger_ms, int codec, level, bint fast, bint ignore_keys,
                  key_serializer=None, value_serializer=None, log=None):
        self.open = {}
        self.queued = {}
        self.topics = {}
        self.owner = owner
        self.lock_acquire = lock.acquire
        self.lock_release = lock.release
        self.cluster = cluster
        self.clock = clock
        self.metadata_type = metadata_type
        self.too_large = too_large
        self.rng = rng
        self.batch_size = max(batch_size, 1)
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.linger_ms = linger_ms
        self.codec = codec
        self.level = level
        self.fast = fast
        self.ignore_keys = ignore_keys
        self.log = log if log is not None else _log
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer

    cdef int64_t _now(self) except? -1:
        if self.clock is None:
            return _ms(CLOCK_MONOTONIC)
        return self.clock.now_ms()

    cdef int64_t _wall(self) except? -1:
        if self.clock is None:
            return _ms(CLOCK_REALTIME)
        return self.clock.wall_ms()

    # -------------------------------------------------------------- topics
    def set_cluster(self, cluster):
        """A new metadata snapshot (the metadata's listener): topic states of older ones are
        rebuilt by the producer's general path before the fast path uses them again."""
        self.cluster = cluster

    def set_topic(self, str topic, cluster, list all_ids, list available, dict tps):
        """Install a topic's partitions from a new metadata snapshot (its open batches and
        sticky partition carry over)."""
        cdef TopicState state = TopicState(topic, cluster, all_ids, available, tps)
        cdef TopicState old = self.topics.get(topic)
        cdef Py_ssize_t n
        if old is not None and old.sticky >= 0:
            state.sticky = state.position.get(old.all_ids[old.sticky], -1)
        for n in range(len(all_ids)):
            batch = self.open.get(state.tp_list[n])
            if batch is not None:
                state.slots[n] = batch
        self.topics[topic] = state
        return state

    def topic_state(self, str topic):
        """The topic's TopicState if it is of the current metadata snapshot, else None."""
        cdef TopicState state = self.topics.get(topic)
        if state is None or state.cluster is not self.cluster:
            return None
        return state

    cdef Py_ssize_t _sticky(self, TopicState state) except -1:
        if state.sticky < 0:
            state.sticky = state.position[self.rng.choice(state.available)]
        return state.sticky

    cdef int _next_sticky(self, object tp) except -1:
        cdef TopicState state = self.topics.get(tp[0])
        if state is None or state.sticky < 0:
            return 0
        old = state.all_ids[state.sticky]
        if old != tp[1]:
            return 0
        ids = [p for p in state.available if p != old]
        if ids:
            state.sticky = state.position[self.rng.choice(ids)]
        return 0

    # -------------------------------------------------------------- batches
    cdef ProducerBatch _new_batch(self, object tp, int64_t now):
        cdef ProducerBatch batch = ProducerBatch(tp, now, self.metadata_type, self.owner, self.log)
        batch.in_open = True
        self.open[tp] = batch
        return batch

    cdef int _unopen(self, ProducerBatch batch) except -1:
        if batch.in_open:
            batch.in_open = False
            if self.open.get(batch.tp) is batch:
                del self.open[batch.tp]
        return 0

    cdef int _queue_full(self, ProducerBatch batch) except -1:
        """A batch closed by size joins its partition's queue of batches to send."""
        self._unopen(batch)
        batch.close(self.codec, self.level)
        q = self.queued.get(batch.tp)
        if q is None:
            q = self.queued[batch.tp] = _deque()
        q.append(batch)
        self.batch_closed = True
        self._next_sticky(batch.tp)
        return 0

    def take_open(self, tp):
        """Remove tp's open batch to send it now: closed, and keyless records move on to
        another partition."""
        cdef ProducerBatch batch = self.open[tp]
        self._unopen(batch)
        batch.close(self.codec, self.level)
        self._next_sticky(tp)
        return batch

    def close_open(self, tp):
        """Close tp's open batch into its queue (as a full batch would be)."""
        cdef ProducerBatch batch = self.open.get(tp)
        if batch is not None:
            self._queue_full(batch)

    def fail_all(self, exc):
        """Fail every open and queued batch (the producer is closing)."""
        cdef ProducerBatch batch
        for batch in list(self.open.values()):
            batch.in_open = False
            batch.fail(exc)
        self.open.clear()
        for q in self.queued.values():
            for batch in q:
                batch.fail(exc)
            q.clear()
        self.buffered_bytes = 0

    cdef RecordFuture _future(self, ProducerBatch batch, Py_ssize_t index):
        cdef RecordFuture fut = RecordFuture.__new__(RecordFuture)
        fut.batch = batch
        fut.index = index
        return fut

    cdef RecordFuture _append(self, TopicState state, Py_ssize_t pos, object tp, int64_t ts, object key,
                              object value, object headers, int32_t hsize, int64_t now):
        """Append one record to tp's open batch (state/pos: its slot, or state None)."""
        cdef ProducerBatch batch = None
        cdef RecordBatchBuilder b
        cdef Py_ssize_t size, buf_len
        cdef int32_t count, last_delta
        cdef int64_t base_ts, max_ts
        cdef bint has_base_ts
        if state is not None:
            batch = state.slots[pos]
        if batch is None or not batch.in_open:
            batch = self.open.get(tp)
            if batch is None:
                batch = self._new_batch(tp, now)
        elif batch.count and batch._size() >= self.batch_size:
            self._queue_full(batch)
            batch = self._new_batch(tp, now)
        if state is not None:
            state.slots[pos] = batch
        b = batch.builder
        buf_len, count, base_ts = b._buf.len, b._count, b._base_ts
        has_base_ts, max_ts, last_delta = b._has_base_ts, b._max_ts, b._last_delta
        try:
            size = b.add(ts, key, value, headers, 0, False)
        except BaseException:
            if batch.count == 0:        # an empty batch is never sent
                self._unopen(batch)
            raise
        if batch._size() > self.max_request_size:
            # Too large for one request with what the batch holds: the record opens the next
            # batch; too large on its own: it fails here, not at the broker.
            batch._drop_last(buf_len, count, base_ts, has_base_ts, max_ts, last_delta)
            if count:
                self._queue_full(batch)
                batch = self._new_batch(tp, now)
                if state is not None:
                    state.slots[pos] = batch
                b = batch.builder
                try:
                    size = b.add(ts, key, value, headers, 0, False)
                except BaseException:
                    self._unopen(batch)
                    raise
                if batch._size() > self.max_request_size:
                    batch._drop_last(0, 0, -1, False, -1, -1)
                    return self._too_large(batch, tp, size, now)
            else:
                return self._too_large(batch, tp, size, now)
        batch._note(ts, -1 if key is None else <int32_t>len(key), -1 if value is None else <int32_t>len(value),
                    hsize)
        batch.record_bytes += size
        self.buffered_bytes += size
        self.records_sent += 1
        if batch._size() >= self.batch_size:
            self._queue_full(batch)
        return self._future(batch, batch.count - 1)

    cdef RecordFuture _too_large(self, ProducerBatch batch, object tp, Py_ssize_t size, int64_t now):
        # The (now empty) batch is not sent.
        self._unopen(batch)
        self.records_sent += 1
        failed = ProducerBatch(tp, now, self.metadata_type, self.owner, self.log)
        failed.fail(self.too_large(f"record of {size} bytes exceeds max.request.size ({self.max_request_size})"))
        return self._future(failed, 0)

    def append(self, tp, int64_t timestamp_ms, key, value, headers, int32_t header_size, int64_t now):
        """Append one (serialized) record to tp's open batch; returns its future. For the
        producer's general path: the caller holds the lock and checked the arguments."""
        state = self.topics.get(tp[0])
        if state is not None and (<TopicState>state).position.get(tp[1]) is not None:
            return self._append(state, (<TopicState>state).position[tp[1]], tp, timestamp_ms, key, value,
                                headers, header_size, now)
        return self._append(None, 0, tp, timestamp_ms, key, value, headers, header_size, now)

    def sticky_position(self, TopicState state):
        """The partition id for a keyless record of state's topic (choosing one if needed)."""
        return state.all_ids[self._sticky(state)]

    # -------------------------------------------------------------- send()
    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """Queue one record; returns a future of its RecordMetadata (kafka-python's send())."""
        cdef TopicState state
        cdef PyObject* found
        cdef Py_ssize_t pos, hsize_total = -1, n
        cdef int64_t ts = 0, now
        cdef RecordFuture fut
        cdef Py_ssize_t klen
        # Cases the fast path does not take, before anything changes: the general path.
        if not self.fast or type(topic) is not str:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        if self.key_serializer is None and key is not None and type(key) is not bytes:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        if self.value_serializer is None and value is not None and type(value) is not bytes:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        if timestamp_ms is not None and type(timestamp_ms) is not int:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        if headers is not None and type(headers) is not list:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        found = PyDict_GetItem(self.topics, topic)
        if found == NULL:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        state = <TopicState>found
        if state.cluster is not self.cluster or not state.all_ids:
            return self._slow(topic, value, key, headers, partition, timestamp_ms)
        if partition is not None:
            if type(partition) is not int:
                return self._slow(topic, value, key, headers, partition, timestamp_ms)
            found = PyDict_GetItem(state.position, partition)
            if found == NULL:
                return self._slow(topic, value, key, headers, partition, timestamp_ms)
            pos = <Py_ssize_t><object>found
        else:
            pos = -1
        if headers:
            hsize_total = 0
            for h in <list>headers:
                if type(h) is not tuple or len(<tuple>h) != 2:
                    return self._slow(topic, value, key, headers, partition, timestamp_ms)
                hk = (<tuple>h)[0]
                hv = (<tuple>h)[1]
                if type(hk) is not str or (hv is not None and type(hv) is not bytes):
                    return self._slow(topic, value, key, headers, partition, timestamp_ms)
                PyUnicode_AsUTF8AndSize(hk, &n)
                hsize_total += n + (len(<bytes>hv) if hv is not None else 0)
            if hsize_total > 0x7FFFFFFF:
                return self._slow(topic, value, key, headers, partition, timestamp_ms)
        if timestamp_ms is not None:
            ts = PyLong_AsLongLong(timestamp_ms)
        # Serialized only now that nothing can send the record to the general path (which
        # would serialize it again); a closed producer refuses before serializing.
        if self.closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if self.key_serializer is not None:
            key = _serialized(self.key_serializer, topic, headers, key, "key")
        if self.value_serializer is not None:
            value = _serialized(self.value_serializer, topic, headers, value, "value")
        self.lock_acquire()
        try:
            if self.closed:
                raise IllegalStateError("cannot send: the producer is closed")
            now = self._now()
            if timestamp_ms is None:
                ts = self._wall()
            if pos < 0:
                if key is not None and not self.ignore_keys:
                    klen = len(<bytes>key)
                    pos = (_murmur2(<const uint8_t*><char*>key, klen) & 0x7FFFFFFF) % len(state.all_ids)
                else:
                    pos = self._sticky(state)
            fut = self._append(state, pos, state.tp_list[pos], ts, key, value, headers,
                               <int32_t>hsize_total, now)
            if (self.buffered_bytes > self.buffer_memory or self.batch_closed or now >= self.next_io_ms
                    or self.linger_ms == 0):
                self._after_send(now)
        finally:
            self.lock_release()
        return fut

    cdef object _producer(self):
        producer = self.owner()
        if producer is None:
            raise IllegalStateError("the producer is gone")
        return producer

    cdef object _slow(self, topic, value, key, headers, partition, timestamp_ms):
        return self._producer()._send_slow(topic, value, key, headers, partition, timestamp_ms)

    cdef int _after_send(self, int64_t now) except -1:
        self._producer()._after_send(now)
        return 0

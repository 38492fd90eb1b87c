# cimport interface of kcore.accumulator: the producer's batches, record futures and send path.
from libc.stdint cimport int32_t, int64_t
from kcore.builder cimport RecordBatchBuilder


ctypedef struct RecordInfo:
    int64_t timestamp
    int32_t key_size          # -1: no key
    int32_t value_size        # -1: no value
    int32_t header_size       # -1: no headers


cdef class ProducerBatch:
    cdef readonly object tp
    cdef RecordBatchBuilder builder
    cdef public int64_t created_ms
    cdef public int attempts
    cdef public object payload
    cdef public int64_t retry_at_ms
    cdef public Py_ssize_t record_bytes     # encoded (uncompressed) record bytes, for buffer.memory
    cdef readonly bint closed
    cdef bint in_open                       # the accumulator's open batch of its partition
    cdef RecordInfo* info
    cdef Py_ssize_t count, capacity
    cdef int state
    cdef int64_t base_offset, append_time, log_start_offset
    cdef object error
    cdef list listened                      # futures with listeners, None once complete
    cdef object metadata_type
    cdef object log                         # where listeners' errors are logged
    cdef readonly object owner              # a weak reference to the producer

    cdef Py_ssize_t _size(self)
    cdef int _note(self, int64_t ts, int32_t ks, int32_t vs, int32_t hs) except -1
    cdef void _drop_last(self, Py_ssize_t buf_len, int32_t count, int64_t base_ts, bint has_base_ts,
                         int64_t max_ts, int32_t last_delta) noexcept
    cdef void _release(self)
    cdef object _metadata(self, Py_ssize_t i)
    cdef void _fire(self)


cdef class RecordFuture:
    cdef readonly ProducerBatch batch
    cdef readonly Py_ssize_t index
    cdef list listeners

    cdef object _listen(self, int kind, object fn, tuple args)
    cdef void _fire_all(self)
    cdef void _fire_one(self, int kind, object fn, tuple args)
    cdef object _owner(self)


cdef class TopicState:
    cdef readonly str topic
    cdef readonly object cluster
    cdef readonly list all_ids              # partition ids, in metadata order
    cdef readonly list available            # ids with a leader (all of them if none has one)
    cdef readonly dict tps                  # id -> its (one shared) TopicPartition
    cdef list tp_list                       # TopicPartition per position in all_ids
    cdef dict position                      # id -> position in all_ids
    cdef list slots                         # open batch (or None) per position
    cdef Py_ssize_t sticky                  # position, -1: none chosen yet


cdef class RecordAccumulator:
    cdef readonly dict open                 # TopicPartition -> ProducerBatch being filled
    cdef readonly dict queued               # TopicPartition -> deque of closed/retried batches
    cdef readonly dict topics               # topic -> TopicState
    cdef public Py_ssize_t buffered_bytes
    cdef public bint batch_closed           # a batch filled since the producer last ran its I/O
    cdef public int64_t next_io_ms
    cdef public Py_ssize_t records_sent
    cdef public bint closed
    cdef bint fast                          # the default partitioner
    cdef object key_serializer, value_serializer    # fn(topic, headers, obj) or None
    cdef bint ignore_keys
    cdef Py_ssize_t batch_size, max_request_size, buffer_memory
    cdef int64_t linger_ms
    cdef int codec
    cdef object level
    cdef object clock                       # None: the system clocks, read in C
    cdef public object cluster              # the current metadata snapshot (set_cluster)
    cdef object lock_acquire, lock_release
    cdef readonly object owner              # weak reference to the producer
    cdef object metadata_type, too_large, rng, log

    cdef int64_t _now(self) except? -1
    cdef int64_t _wall(self) except? -1
    cdef Py_ssize_t _sticky(self, TopicState state) except -1
    cdef int _next_sticky(self, object tp) except -1
    cdef ProducerBatch _new_batch(self, object tp, int64_t now)
    cdef int _unopen(self, ProducerBatch batch) except -1
    cdef int _queue_full(self, ProducerBatch batch) except -1
    cdef RecordFuture _future(self, ProducerBatch batch, Py_ssize_t index)
    cdef RecordFuture _append(self, TopicState state, Py_ssize_t pos, object tp, int64_t ts, object key,
                              object value, object headers, int32_t hsize, int64_t now)
    cdef RecordFuture _too_large(self, ProducerBatch batch, object tp, Py_ssize_t size, int64_t now)
    cdef object _producer(self)
    cdef object _slow(self, topic, value, key, headers, partition, timestamp_ms)
    cdef int _after_send(self, int64_t now) except -1

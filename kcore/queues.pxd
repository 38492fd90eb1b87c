# cython: language_level=3
"""C interface of kcore.queues: per-node unsent and in-flight request queues (mechanisms §10, §11).

Per node, requests sit in a ring buffer: a Python list holds the request objects (so the
garbage collector sees request -> future -> callback -> client cycles) and parallel C arrays
hold their times. Capacities are powers of two; rings only grow.
"""
from libc.stdint cimport int32_t, int64_t


cdef class _UnsentNode:
    cdef list _items            # ring of requests, None where empty
    cdef int64_t* _times        # enqueue time of each request (non-decreasing from head)
    cdef Py_ssize_t _mask       # capacity - 1 (capacity is a power of two)
    cdef Py_ssize_t _head
    cdef Py_ssize_t _count

    cdef int _grow(self) except -1
    cdef int _push(self, object request, int64_t t) except -1
    cdef list _snapshot(self)
    cdef list _pop_front(self, Py_ssize_t n)


cdef class UnsentQueue:
    cdef dict _nodes            # node id -> _UnsentNode (kept when drained, dropped by remove_node)
    cdef Py_ssize_t _count
    cdef int64_t _oldest_bound  # <= every queued enqueue time; INT64_MAX when known empty


cdef class _InFlightNode:
    cdef list _items            # ring of requests, oldest at _head
    cdef int32_t* _corr         # correlation ids
    cdef int64_t* _send         # send times
    cdef int64_t* _deadline     # send + timeout (saturated); timed out once now > deadline
    # Monotonic deque of absolute sequence numbers whose deadlines increase strictly from
    # its head: its head is the minimum deadline of the node, maintained in amortised O(1).
    cdef int64_t* _mono
    cdef Py_ssize_t _mask
    cdef Py_ssize_t _head
    cdef Py_ssize_t _count
    cdef Py_ssize_t _mono_head
    cdef Py_ssize_t _mono_count
    cdef int64_t _base_seq      # absolute sequence number of the request at _head

    cdef int _grow(self) except -1
    cdef void _mono_push(self, int64_t seq) noexcept nogil
    cdef void _rebuild_mono(self) noexcept nogil
    cdef list _snapshot(self)
    cdef object _pop_oldest(self)
    cdef object _pop_newest(self)
    cdef int64_t _min_deadline(self) noexcept nogil


cdef class InFlightRequests:
    cdef dict _nodes            # node id -> _InFlightNode (kept when empty, dropped by clear_node)
    cdef Py_ssize_t _max
    cdef Py_ssize_t _count

# cython: language_level=3
"""Per-node request queues of the network layer (mechanisms §10 ``unsent``, mechanisms §11 in-flight).

``UnsentQueue``: requests created by ConsumerNetworkClient.send() that no connection has
taken yet, FIFO per node, with their enqueue time for the unsent expiry.
``InFlightRequests``: requests written to a connection and awaiting their response, oldest
first, capped by max.in.flight.requests.per.connection, matched by correlation id.

Time conventions are those of kcore.timers: int64 ms, "expired" means strictly more than
the timeout elapsed, returned instants are the first ``now`` at which the condition holds,
arithmetic saturates instead of wrapping.

Neither class locks: the network client serialises access. The Python methods keep the GIL:
each does O(1) (amortised) work on small arrays plus list/dict operations on Python
objects, so a GIL release would cost more than the work it frees.
"""
from cpython.number cimport PyNumber_Index
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t
from kcore.timemath cimport as_ms as _ms, sat_add as _sat_add, sat_sub as _sat_sub

from kcore.errors import (ConfigurationError, CorrelationIdMismatchError,
                            IllegalArgumentError, IllegalStateError)

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX




cdef inline int32_t _int32(object x) except? -1:
    # Kafka correlation ids are INT32; OverflowError outside that range.
    if type(x) is not int:
        x = PyNumber_Index(x)
    return x


__all__ = ["UnsentQueue", "InFlightRequests"]

cdef Py_ssize_t _INITIAL_CAP = 8    # a power of two




cdef inline Py_ssize_t _doubled_cap(Py_ssize_t cap, size_t widest) except -1:
    if cap > PY_SSIZE_T_MAX // <Py_ssize_t>(2 * widest):
        raise MemoryError("request queue is too large")
    return cap * 2


cdef inline void* _alloc(Py_ssize_t n, size_t size) except NULL:
    cdef void* p = PyMem_Malloc(n * size)
    if p == NULL:
        raise MemoryError()
    return p


cdef list _ring_items(list items, Py_ssize_t head, Py_ssize_t count, Py_ssize_t mask):
    """A ring's items, oldest first, as a new list (the ring is unchanged)."""
    cdef list out = []
    cdef Py_ssize_t k
    for k in range(count):
        out.append(items[(head + k) & mask])
    return out


# ======================================================================= unsent
cdef class _UnsentNode:
    def __cinit__(self):
        self._times = <int64_t*>_alloc(_INITIAL_CAP, sizeof(int64_t))
        self._items = [None] * _INITIAL_CAP
        self._mask = _INITIAL_CAP - 1
        self._head = 0
        self._count = 0

    def __dealloc__(self):
        PyMem_Free(self._times)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t new_cap = _doubled_cap(self._mask + 1, sizeof(int64_t))
        cdef Py_ssize_t k, idx
        cdef int64_t* times = <int64_t*>_alloc(new_cap, sizeof(int64_t))
        cdef list items
        try:
            items = [None] * new_cap
        except BaseException:
            PyMem_Free(times)
            raise
        for k in range(self._count):
            idx = (self._head + k) & self._mask
            times[k] = self._times[idx]
            items[k] = self._items[idx]
        PyMem_Free(self._times)
        self._times = times
        self._items = items
        self._mask = new_cap - 1
        self._head = 0
        return 0

    cdef int _push(self, object request, int64_t t) except -1:
        cdef Py_ssize_t idx
        if self._count > self._mask:
            self._grow()
        idx = (self._head + self._count) & self._mask
        self._items[idx] = request
        self._times[idx] = t
        self._count += 1
        return 0

    cdef list _snapshot(self):
        return _ring_items(self._items, self._head, self._count, self._mask)

    cdef list _pop_front(self, Py_ssize_t n):
        cdef list out = []
        cdef Py_ssize_t k
        for k in range(n):
            out.append(self._items[self._head])   # out holds the reference before we drop ours
            self._items[self._head] = None
            self._head = (self._head + 1) & self._mask
        self._count -= n
        return out


cdef class UnsentQueue:
    """Requests per node not yet handed to a connection (mechanisms §10 ``unsent``).

    FIFO per node. Each request is stamped with its enqueue time; stamps never decrease
    within a node (a ``now_ms`` older than the node's newest stamp is raised to it), so the
    oldest request of a node is always at its head and expiry stops at the first young one.
    ``remove_expired`` returns at once when nothing can have expired: it keeps a lower bound
    of every stamp and scans nodes only when that bound is older than the cutoff.
    """

    def __cinit__(self):
        self._nodes = {}
        self._count = 0
        self._oldest_bound = INT64_MAX

    def put(self, node_id, request, now_ms):
        """Queue ``request`` for ``node_id``, stamped with ``now_ms``."""
        cdef int64_t t = _ms(now_ms)
        cdef _UnsentNode node = self._nodes.get(node_id)
        if node is None:
            node = _UnsentNode()
            self._nodes[node_id] = node
        elif node._count:
            t = max(t, node._times[(node._head + node._count - 1) & node._mask])
        node._push(request, t)
        self._count += 1
        if t < self._oldest_bound:
            self._oldest_bound = t

    def has_pending(self, node_id=None):
        cdef _UnsentNode node
        if node_id is None:
            return self._count > 0
        node = self._nodes.get(node_id)
        return node is not None and node._count > 0

    def pending_count(self, node_id=None):
        cdef _UnsentNode node
        if node_id is None:
            return self._count
        node = self._nodes.get(node_id)
        return 0 if node is None else node._count

    def nodes(self):
        """Nodes with at least one queued request."""
        cdef _UnsentNode node
        return [nid for nid, node in self._nodes.items() if node._count]

    def drain(self, node_id, max_requests=None):
        """Remove and return the node's requests, oldest first (at most ``max_requests``)."""
        cdef _UnsentNode node = self._nodes.get(node_id)
        cdef Py_ssize_t n
        limit = None
        if max_requests is not None:
            limit = PyNumber_Index(max_requests)
            if limit < 0:
                raise IllegalArgumentError(f"max_requests must be >= 0 (got {limit})")
        if node is None or node._count == 0:
            return []
        n = node._count
        if limit is not None and limit < n:
            n = limit
        self._count -= n
        return node._pop_front(n)

    def peek_oldest_ms(self, node_id):
        """Enqueue stamp of the node's oldest request, or None."""
        cdef _UnsentNode node = self._nodes.get(node_id)
        if node is None or node._count == 0:
            return None
        return node._times[node._head]

    def remove_expired(self, now_ms, timeout_ms):
        """Remove and return requests queued more than ``timeout_ms`` before ``now_ms``.

        Grouped by node, oldest first within a node; callers fail their futures.
        """
        cdef _UnsentNode node
        cdef int64_t cutoff, bound
        cdef int64_t now = _ms(now_ms)
        cdef int64_t timeout = _ms(timeout_ms)
        cdef Py_ssize_t n
        cdef list expired
        if timeout < 0:
            raise IllegalArgumentError(f"timeout_ms must be >= 0 (got {timeout})")
        # now - t > timeout  <=>  t < now - timeout; a saturated cutoff (INT64_MIN) is exact
        # too, since no stamp is below it.
        cutoff = _sat_sub(now, timeout)
        if self._oldest_bound >= cutoff:
            return []
        expired = []
        bound = INT64_MAX
        for node in self._nodes.values():
            n = 0
            while n < node._count and node._times[(node._head + n) & node._mask] < cutoff:
                n += 1
            if n:
                expired.extend(node._pop_front(n))
            if node._count and node._times[node._head] < bound:
                bound = node._times[node._head]
        self._count -= len(expired)
        self._oldest_bound = bound
        return expired

    def requests(self, node_id):
        """The node's queued requests, oldest first, left queued (a new list)."""
        cdef _UnsentNode node = self._nodes.get(node_id)
        return [] if node is None else node._snapshot()

    def remove_node(self, node_id):
        """Remove and return all of the node's requests (the node disconnected)."""
        cdef _UnsentNode node = self._nodes.pop(node_id, None)
        if node is None:
            return []
        self._count -= node._count
        return node._pop_front(node._count)

    def __len__(self):
        return self._count

    def __repr__(self):
        return f"UnsentQueue(pending={self._count}, nodes={self.nodes()})"


# ======================================================================= in flight
cdef class _InFlightNode:
    def __cinit__(self):
        cdef Py_ssize_t cap = _INITIAL_CAP
        self._corr = NULL
        self._send = NULL
        self._deadline = NULL
        self._mono = NULL
        self._corr = <int32_t*>_alloc(cap, sizeof(int32_t))
        self._send = <int64_t*>_alloc(cap, sizeof(int64_t))
        self._deadline = <int64_t*>_alloc(cap, sizeof(int64_t))
        self._mono = <int64_t*>_alloc(cap, sizeof(int64_t))
        self._items = [None] * cap
        self._mask = cap - 1
        self._head = 0
        self._count = 0
        self._mono_head = 0
        self._mono_count = 0
        self._base_seq = 0

    def __dealloc__(self):
        PyMem_Free(self._corr)
        PyMem_Free(self._send)
        PyMem_Free(self._deadline)
        PyMem_Free(self._mono)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t new_cap = _doubled_cap(self._mask + 1, sizeof(int64_t))
        cdef Py_ssize_t k, idx
        cdef int32_t* corr = NULL
        cdef int64_t* send = NULL
        cdef int64_t* deadline = NULL
        cdef int64_t* mono = NULL
        cdef list items
        try:
            corr = <int32_t*>_alloc(new_cap, sizeof(int32_t))
            send = <int64_t*>_alloc(new_cap, sizeof(int64_t))
            deadline = <int64_t*>_alloc(new_cap, sizeof(int64_t))
            mono = <int64_t*>_alloc(new_cap, sizeof(int64_t))
            items = [None] * new_cap
        except BaseException:
            PyMem_Free(corr)
            PyMem_Free(send)
            PyMem_Free(deadline)
            PyMem_Free(mono)
            raise
        for k in range(self._count):
            idx = (self._head + k) & self._mask
            corr[k] = self._corr[idx]
            send[k] = self._send[idx]
            deadline[k] = self._deadline[idx]
            items[k] = self._items[idx]
        for k in range(self._mono_count):
            mono[k] = self._mono[(self._mono_head + k) & self._mask]
        PyMem_Free(self._corr)
        PyMem_Free(self._send)
        PyMem_Free(self._deadline)
        PyMem_Free(self._mono)
        self._corr = corr
        self._send = send
        self._deadline = deadline
        self._mono = mono
        self._items = items
        self._mask = new_cap - 1
        self._head = 0
        self._mono_head = 0
        return 0

    cdef void _mono_push(self, int64_t seq) noexcept nogil:
        cdef int64_t d = self._deadline[(self._head + (seq - self._base_seq)) & self._mask]
        cdef int64_t back
        while self._mono_count:
            back = self._mono[(self._mono_head + self._mono_count - 1) & self._mask]
            if self._deadline[(self._head + (back - self._base_seq)) & self._mask] < d:
                break
            self._mono_count -= 1
        self._mono[(self._mono_head + self._mono_count) & self._mask] = seq
        self._mono_count += 1

    cdef void _rebuild_mono(self) noexcept nogil:
        cdef Py_ssize_t k
        self._mono_head = 0
        self._mono_count = 0
        for k in range(self._count):
            self._mono_push(self._base_seq + k)

    cdef list _snapshot(self):
        return _ring_items(self._items, self._head, self._count, self._mask)

    cdef object _pop_oldest(self):
        cdef Py_ssize_t idx = self._head
        request = self._items[idx]
        self._items[idx] = None
        if self._mono_count and self._mono[self._mono_head] == self._base_seq:
            self._mono_head = (self._mono_head + 1) & self._mask
            self._mono_count -= 1
        self._head = (self._head + 1) & self._mask
        self._count -= 1
        self._base_seq += 1
        return request

    cdef object _pop_newest(self):
        cdef Py_ssize_t idx = (self._head + self._count - 1) & self._mask
        request = self._items[idx]
        self._items[idx] = None
        self._count -= 1
        # The monotonic deque cannot give back the candidates the newest request evicted:
        # rebuild it. O(count <= max.in.flight), and only for acks=0 style requests.
        self._rebuild_mono()
        return request

    cdef int64_t _min_deadline(self) noexcept nogil:
        # Precondition: _count > 0 (then the newest request is always in the deque).
        cdef int64_t seq = self._mono[self._mono_head]
        return self._deadline[(self._head + (seq - self._base_seq)) & self._mask]


cdef class InFlightRequests:
    """Requests sent on each node's connection and awaiting a response (mechanisms §11).

    Oldest first per node; responses arrive in send order, so ``complete_next`` matches the
    oldest request's correlation id. Each request has its own timeout (deadline = send +
    timeout); the minimum deadline per node is kept in a monotonic deque, so
    ``nodes_with_timed_out_requests`` is O(1) per node even when timeouts differ. With one
    shared request.timeout.ms the deadlines are in send order and the deque is trivial.
    """

    def __init__(self, max_per_connection):
        if (not isinstance(max_per_connection, int) or isinstance(max_per_connection, bool)
                or not 1 <= max_per_connection <= 2147483647):
            raise ConfigurationError(
                "max.in.flight.requests.per.connection must be an integer between 1 and "
                f"2147483647 (got {max_per_connection!r})")
        self._max = max_per_connection
        self._nodes = {}
        self._count = 0

    @property
    def max_per_connection(self):
        return self._max

    def add(self, node_id, correlation_id, request, send_ms, timeout_ms):
        """Record ``request`` as sent on ``node_id`` at ``send_ms``.

        Raises IllegalStateError when the node already has max_per_connection requests in
        flight (callers check ``can_send_more`` first).
        """
        cdef int32_t cid = _int32(correlation_id)
        cdef int64_t send = _ms(send_ms)
        cdef int64_t timeout = _ms(timeout_ms)
        cdef _InFlightNode node = self._nodes.get(node_id)
        cdef Py_ssize_t idx
        if timeout < 0:
            raise IllegalArgumentError(f"timeout_ms must be >= 0 (got {timeout})")
        if node is None:
            node = _InFlightNode()
            self._nodes[node_id] = node
        elif node._count >= self._max:
            raise IllegalStateError(
                f"node {node_id!r} already has {node._count} requests in flight "
                f"(max.in.flight.requests.per.connection={self._max})")
        if node._count > node._mask:
            node._grow()
        idx = (node._head + node._count) & node._mask
        node._items[idx] = request
        node._corr[idx] = cid
        node._send[idx] = send
        node._deadline[idx] = _sat_add(send, timeout)
        node._count += 1
        node._mono_push(node._base_seq + node._count - 1)
        self._count += 1

    def can_send_more(self, node_id):
        """Fewer than max_per_connection requests in flight on the node."""
        cdef _InFlightNode node = self._nodes.get(node_id)
        return node is None or node._count < self._max

    def count(self, node_id=None):
        cdef _InFlightNode node
        if node_id is None:
            return self._count
        node = self._nodes.get(node_id)
        return 0 if node is None else node._count

    def requests(self, node_id):
        """The node's requests in flight, oldest first, left in flight (a new list)."""
        cdef _InFlightNode node = self._nodes.get(node_id)
        return [] if node is None else node._snapshot()

    def nodes(self):
        """Nodes with at least one request in flight."""
        cdef _InFlightNode node
        return [nid for nid, node in self._nodes.items() if node._count]

    def complete_next(self, node_id, correlation_id):
        """Remove and return the node's oldest request, whose correlation id must match.

        Raises CorrelationIdMismatchError (a ProtocolError: the caller closes the connection)
        if the id differs or nothing is in flight; the queue is then left unchanged, so
        ``clear_node`` still returns every request, the mismatched one included. The error
        carries ``node_id``, ``expected`` (None if nothing was in flight) and ``received``.
        """
        cdef int64_t cid = _ms(correlation_id)   # int64: an out-of-int32 id just mismatches
        cdef _InFlightNode node = self._nodes.get(node_id)
        if node is None or node._count == 0:
            _raise_mismatch(node_id, None, correlation_id)
        if node._corr[node._head] != cid:
            _raise_mismatch(node_id, node._corr[node._head], correlation_id)
        self._count -= 1
        return node._pop_oldest()

    def complete_last_unanswered(self, node_id):
        """Remove and return the node's newest request (one that expects no response)."""
        cdef _InFlightNode node = self._nodes.get(node_id)
        if node is None or node._count == 0:
            raise IllegalStateError(f"no request in flight on node {node_id!r}")
        self._count -= 1
        return node._pop_newest()

    def clear_node(self, node_id):
        """Remove and return every request of the node, oldest first (it disconnected)."""
        cdef _InFlightNode node = self._nodes.pop(node_id, None)
        cdef list out = []
        if node is None:
            return out
        self._count -= node._count
        while node._count:
            out.append(node._pop_oldest())
        return out

    def nodes_with_timed_out_requests(self, now_ms):
        """Nodes with a request sent more than its timeout before ``now_ms``."""
        cdef int64_t now = _ms(now_ms)
        cdef _InFlightNode node
        cdef list out = []
        for nid, node in self._nodes.items():
            if node._count and now > node._min_deadline():
                out.append(nid)
        return out

    def next_timeout_ms(self, node_id=None):
        """First now_ms at which a request (of the node, or of any node) counts as timed out.

        None when nothing is in flight. Saturates at INT64_MAX.
        """
        cdef _InFlightNode node
        cdef int64_t best = INT64_MAX, d
        cdef bint found = False
        if node_id is not None:
            node = self._nodes.get(node_id)
            if node is None or node._count == 0:
                return None
            return _sat_add(node._min_deadline(), 1)
        for node in self._nodes.values():
            if node._count:
                d = node._min_deadline()
                if not found or d < best:
                    best = d
                    found = True
        return _sat_add(best, 1) if found else None

    def __len__(self):
        return self._count

    def __repr__(self):
        return (f"InFlightRequests(max_per_connection={self._max}, in_flight={self._count}, "
                f"nodes={self.nodes()})")


cdef _raise_mismatch(node_id, expected, received):
    if expected is None:
        msg = (f"response with correlation id {received} from node {node_id!r}, "
               "but no request is in flight on that connection")
    else:
        msg = (f"response with correlation id {received} from node {node_id!r}, "
               f"but the oldest request in flight has correlation id {expected}")
    err = CorrelationIdMismatchError(msg)
    err.node_id = node_id
    err.expected = expected
    err.received = received
    raise err

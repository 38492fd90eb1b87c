# cython: language_level=3
"""Delayed-task min-heap and heartbeat timing state (mechanisms §3, §10).

``DelayedTaskQueue`` is ConsumerNetworkClient's schedule (heartbeat and auto-commit are such
tasks). ``Heartbeat`` is the coordinator's timing state; its logic lives in C functions on a
plain struct (see timers.pxd) so that a thread without the GIL can drive it too.

Neither class locks: the owner serialises access (the coordinator lock for Heartbeat, the
network client's lock for the task queue). The Python methods do not release the GIL: each
is a handful of integer operations (or O(log n) array moves), far cheaper than a GIL
release/reacquire, and releasing it would only invite a GIL convoy with the I/O threads.
"""
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint64_t
from kcore.posixsys cimport pthread_mutex_destroy, pthread_mutex_init, pthread_mutex_lock, pthread_mutex_unlock
from kcore.timemath cimport as_ms as _ms, sat_add as _sat_add, sat_sub as _sat_sub

from kcore.errors import ConfigurationError, IllegalArgumentError

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX




__all__ = ["DelayedTaskQueue", "Heartbeat"]

# Kafka declares session.timeout.ms, heartbeat.interval.ms and max.poll.interval.ms as INT.
cdef int64_t _INT_CONFIG_MAX = 2147483647




cdef inline int64_t _max64(int64_t a, int64_t b) noexcept nogil:
    return a if a > b else b


cdef inline int64_t _min64(int64_t a, int64_t b) noexcept nogil:
    return a if a < b else b


# ---------------------------------------------------------------- heartbeat (C level)
cdef int hb_init(heartbeat_state* s, int64_t session_timeout_ms, int64_t heartbeat_interval_ms,
                 int64_t max_poll_interval_ms, int64_t retry_backoff_ms,
                 int64_t now) noexcept nogil:
    if session_timeout_ms <= 0 or session_timeout_ms > _INT_CONFIG_MAX:
        return HB_BAD_SESSION_TIMEOUT
    if heartbeat_interval_ms <= 0 or heartbeat_interval_ms > _INT_CONFIG_MAX:
        return HB_BAD_HEARTBEAT_INTERVAL
    if max_poll_interval_ms <= 0 or max_poll_interval_ms > _INT_CONFIG_MAX:
        return HB_BAD_MAX_POLL_INTERVAL
    if retry_backoff_ms < 0:
        return HB_BAD_RETRY_BACKOFF
    if heartbeat_interval_ms >= session_timeout_ms:
        return HB_INTERVAL_NOT_BELOW_SESSION
    s.session_timeout_ms = session_timeout_ms
    s.heartbeat_interval_ms = heartbeat_interval_ms
    s.max_poll_interval_ms = max_poll_interval_ms
    s.retry_backoff_ms = retry_backoff_ms
    s.last_heartbeat_send_ms = HB_NEVER
    s.last_heartbeat_receive_ms = HB_NEVER
    # Construction starts the session and the poll interval, and the first heartbeat is due
    # one interval later (as if reset_timeouts(now) had been called).
    s.last_session_reset_ms = now
    s.last_poll_ms = now
    s.heartbeat_timer_start_ms = now
    s.heartbeat_failed = 0
    return HB_OK


cdef void hb_poll(heartbeat_state* s, int64_t now) noexcept nogil:
    s.last_poll_ms = now


cdef void hb_sent_heartbeat(heartbeat_state* s, int64_t now) noexcept nogil:
    s.last_heartbeat_send_ms = now
    s.heartbeat_failed = 0
    s.heartbeat_timer_start_ms = now


cdef void hb_received_heartbeat(heartbeat_state* s, int64_t now) noexcept nogil:
    s.last_heartbeat_receive_ms = now


cdef void hb_fail_heartbeat(heartbeat_state* s, int64_t now) noexcept nogil:
    # The retry waits retry.backoff.ms from the failure, not from the send: a heartbeat that
    # failed by timing out after request.timeout.ms would otherwise be retried at once.
    s.heartbeat_failed = 1
    s.heartbeat_timer_start_ms = now


cdef void hb_reset_session_timeout(heartbeat_state* s, int64_t now) noexcept nogil:
    s.last_session_reset_ms = now


cdef void hb_reset_timeouts(heartbeat_state* s, int64_t now) noexcept nogil:
    s.last_session_reset_ms = now
    s.last_poll_ms = now
    s.heartbeat_failed = 0
    s.heartbeat_timer_start_ms = now


cdef inline int64_t _hb_delay(const heartbeat_state* s) noexcept nogil:
    return s.retry_backoff_ms if s.heartbeat_failed else s.heartbeat_interval_ms


cdef int64_t hb_time_to_next_heartbeat(const heartbeat_state* s, int64_t now) noexcept nogil:
    # delay - elapsed: a saturated elapsed time still gives the exact (clamped) answer
    cdef int64_t elapsed = _sat_sub(now, s.heartbeat_timer_start_ms)
    return _max64(_sat_sub(_hb_delay(s), elapsed), 0)


cdef bint hb_should_heartbeat(const heartbeat_state* s, int64_t now) noexcept nogil:
    return _sat_sub(now, s.heartbeat_timer_start_ms) >= _hb_delay(s)


cdef int64_t hb_next_heartbeat_ms(const heartbeat_state* s) noexcept nogil:
    return _sat_add(s.heartbeat_timer_start_ms, _hb_delay(s))


cdef bint hb_session_timeout_expired(const heartbeat_state* s, int64_t now) noexcept nogil:
    cdef int64_t base = _max64(s.last_session_reset_ms, s.last_heartbeat_receive_ms)
    # elapsed form: a saturated elapsed time still compares correctly with a timeout < 2**31
    return _sat_sub(now, base) > s.session_timeout_ms


cdef bint hb_poll_timeout_expired(const heartbeat_state* s, int64_t now) noexcept nogil:
    return _sat_sub(now, s.last_poll_ms) > s.max_poll_interval_ms


cdef int64_t hb_time_to_next_poll(const heartbeat_state* s, int64_t now) noexcept nogil:
    cdef int64_t elapsed = _sat_sub(now, s.last_poll_ms)
    return _max64(_sat_sub(s.max_poll_interval_ms, elapsed), 0)


cdef int64_t hb_session_expiry_ms(const heartbeat_state* s) noexcept nogil:
    cdef int64_t base = _max64(s.last_session_reset_ms, s.last_heartbeat_receive_ms)
    return _sat_add(_sat_add(base, s.session_timeout_ms), 1)


cdef int64_t hb_poll_expiry_ms(const heartbeat_state* s) noexcept nogil:
    return _sat_add(_sat_add(s.last_poll_ms, s.max_poll_interval_ms), 1)


cdef int64_t hb_next_wakeup_ms(const heartbeat_state* s, int64_t now) noexcept nogil:
    # `now` is unused today; it is in the signature so a later policy (e.g. jitter, or
    # ignoring already-handled expiries) does not change the C interface.
    return _min64(hb_next_heartbeat_ms(s), _min64(hb_session_expiry_ms(s), hb_poll_expiry_ms(s)))


# ---------------------------------------------------------------- heartbeat (Python)
cdef dict _HB_ERRORS = {
    HB_BAD_SESSION_TIMEOUT: "session.timeout.ms must be between 1 and 2147483647 (got {0})",
    HB_BAD_HEARTBEAT_INTERVAL: "heartbeat.interval.ms must be between 1 and 2147483647 (got {1})",
    HB_BAD_MAX_POLL_INTERVAL: "max.poll.interval.ms must be between 1 and 2147483647 (got {2})",
    HB_BAD_RETRY_BACKOFF: "retry.backoff.ms must be >= 0 (got {3})",
    HB_INTERVAL_NOT_BELOW_SESSION:
        "heartbeat.interval.ms ({1}) must be lower than session.timeout.ms ({0}); "
        "a third of it or less is recommended",
}


cdef inline int _check_stamp(int64_t now_ms) except -1:
    if now_ms == INT64_MIN:
        raise IllegalArgumentError("now_ms = INT64_MIN is reserved as 'never'")
    return 0


cdef class Heartbeat:
    """Heartbeat timing state of one group member (mechanisms §3). Every method takes ``now_ms``.

    Every method holds the object's mutex (``self.mutex``) while it touches the state, so
    a thread that runs without the GIL (kcore.pacemaker) can share the struct: it takes the
    same mutex. Sequences of calls such as "should_heartbeat then sent_heartbeat" are still
    not atomic: Python callers also hold the coordinator lock.
    """

    def __cinit__(self):
        pthread_mutex_init(&self.mutex, NULL)

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mutex)

    def __init__(self, session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms,
                 retry_backoff_ms, now_ms):
        cdef int rc = hb_init(&self.state, _ms(session_timeout_ms), _ms(heartbeat_interval_ms),
                              _ms(max_poll_interval_ms), _ms(retry_backoff_ms), _ms(now_ms))
        if rc != HB_OK:
            raise ConfigurationError(_HB_ERRORS[rc].format(
                session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms,
                retry_backoff_ms))

    cdef heartbeat_state* state_ptr(self) noexcept:
        return &self.state

    # -- events
    def poll(self, now_ms):
        """The application thread called poll(): restart the max.poll.interval.ms clock."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        hb_poll(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)

    def sent_heartbeat(self, now_ms):
        """A heartbeat was sent: the next one is due heartbeat.interval.ms later."""
        cdef int64_t now = _ms(now_ms)
        _check_stamp(now)
        pthread_mutex_lock(&self.mutex)
        hb_sent_heartbeat(&self.state, now)
        pthread_mutex_unlock(&self.mutex)

    def set_heartbeat_interval_ms(self, interval_ms):
        """The group coordinator set the interval (KIP-848: the broker decides it). Kept below
        session.timeout.ms, which the timing checks compare it with; returns the value set."""
        cdef int64_t v = _ms(interval_ms)
        if v < 1:
            raise IllegalArgumentError(f"heartbeat interval must be >= 1 ms (got {interval_ms!r})")
        pthread_mutex_lock(&self.mutex)
        if v >= self.state.session_timeout_ms:
            v = self.state.session_timeout_ms - 1 if self.state.session_timeout_ms > 1 else 1
        self.state.heartbeat_interval_ms = v
        pthread_mutex_unlock(&self.mutex)
        return v

    def received_heartbeat(self, now_ms):
        """A successful (or REBALANCE_IN_PROGRESS) heartbeat response arrived: session alive."""
        cdef int64_t now = _ms(now_ms)
        _check_stamp(now)
        pthread_mutex_lock(&self.mutex)
        hb_received_heartbeat(&self.state, now)
        pthread_mutex_unlock(&self.mutex)

    def fail_heartbeat(self, now_ms):
        """A heartbeat failed: retry retry.backoff.ms after now_ms."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        hb_fail_heartbeat(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)

    def reset_session_timeout(self, now_ms):
        """Restart the session clock only (heartbeat schedule and poll clock unchanged)."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        hb_reset_session_timeout(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)

    def reset_timeouts(self, now_ms):
        """Restart session and poll clocks, clear a failure, next heartbeat one interval away."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        hb_reset_timeouts(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)

    # -- queries
    def time_to_next_heartbeat(self, now_ms):
        """Milliseconds until a heartbeat is due (0 when due now); never negative."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = hb_time_to_next_heartbeat(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)
        return r_

    def should_heartbeat(self, now_ms):
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        cdef bint r_ = hb_should_heartbeat(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)
        return r_

    def session_timeout_expired(self, now_ms):
        """No successful response within session.timeout.ms of max(last reset, last receive)."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        cdef bint r_ = hb_session_timeout_expired(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)
        return r_

    def poll_timeout_expired(self, now_ms):
        """now_ms - last poll > max.poll.interval.ms: the application stalled between polls."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        cdef bint r_ = hb_poll_timeout_expired(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)
        return r_

    def time_to_next_poll(self, now_ms):
        """Milliseconds the application may still take before its next poll(); never negative."""
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = hb_time_to_next_poll(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)
        return r_

    def next_wakeup_ms(self, now_ms):
        """Earliest of: next heartbeat due, session expiry, poll expiry (absolute ms).

        May be <= now_ms when something is due already; wait max(0, result - now_ms).
        """
        cdef int64_t now_ = _ms(now_ms)
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = hb_next_wakeup_ms(&self.state, now_)
        pthread_mutex_unlock(&self.mutex)
        return r_

    # -- read-only state
    @property
    def session_timeout_ms(self):
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = self.state.session_timeout_ms
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def heartbeat_interval_ms(self):
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = self.state.heartbeat_interval_ms
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def max_poll_interval_ms(self):
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = self.state.max_poll_interval_ms
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def retry_backoff_ms(self):
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = self.state.retry_backoff_ms
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def last_heartbeat_send_ms(self):
        """None until the first heartbeat is sent."""
        pthread_mutex_lock(&self.mutex)
        cdef int64_t v = self.state.last_heartbeat_send_ms
        pthread_mutex_unlock(&self.mutex)
        return None if v == HB_NEVER else v

    @property
    def last_heartbeat_receive_ms(self):
        """None until the first heartbeat response arrives."""
        pthread_mutex_lock(&self.mutex)
        cdef int64_t v = self.state.last_heartbeat_receive_ms
        pthread_mutex_unlock(&self.mutex)
        return None if v == HB_NEVER else v

    @property
    def last_session_reset_ms(self):
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = self.state.last_session_reset_ms
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def last_poll_time_ms(self):
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = self.state.last_poll_ms
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def heartbeat_failed(self):
        pthread_mutex_lock(&self.mutex)
        cdef bint r_ = self.state.heartbeat_failed
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def next_heartbeat_ms(self):
        """First now_ms at which should_heartbeat() is true (saturates at INT64_MAX)."""
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = hb_next_heartbeat_ms(&self.state)
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def session_expiry_ms(self):
        """First now_ms at which session_timeout_expired() is true (saturates at INT64_MAX)."""
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = hb_session_expiry_ms(&self.state)
        pthread_mutex_unlock(&self.mutex)
        return r_

    @property
    def poll_expiry_ms(self):
        """First now_ms at which poll_timeout_expired() is true (saturates at INT64_MAX)."""
        pthread_mutex_lock(&self.mutex)
        cdef int64_t r_ = hb_poll_expiry_ms(&self.state)
        pthread_mutex_unlock(&self.mutex)
        return r_

    def __repr__(self):
        cdef heartbeat_state copy
        cdef const heartbeat_state* s = &copy
        pthread_mutex_lock(&self.mutex)
        copy = self.state
        pthread_mutex_unlock(&self.mutex)
        return (f"Heartbeat(session_timeout_ms={s.session_timeout_ms}, "
                f"heartbeat_interval_ms={s.heartbeat_interval_ms}, "
                f"max_poll_interval_ms={s.max_poll_interval_ms}, "
                f"retry_backoff_ms={s.retry_backoff_ms}, "
                f"next_heartbeat_ms={hb_next_heartbeat_ms(s)}, "
                f"failed={bool(s.heartbeat_failed)})")


# ---------------------------------------------------------------- delayed tasks
cdef inline bint _before(const _task_entry* a, const _task_entry* b) noexcept nogil:
    return a.deadline < b.deadline or (a.deadline == b.deadline and a.seq < b.seq)


cdef class DelayedTaskQueue:
    """Tasks ordered by deadline: an indexed binary min-heap in C arrays (mechanisms §10).

    Tasks are compared by identity (like Java's DelayedTask objects): pass the same object
    to ``remove``. Adding a task that is already queued reschedules it (its deadline moves
    and it goes after tasks already queued with the same deadline). Equal deadlines keep
    insertion order via a sequence number. ``add`` and ``remove`` are O(log n); ``pop_due``
    is O(k log n) for k due tasks. Not thread-safe: the owner serialises access.
    """

    def __cinit__(self):
        self._heap = NULL
        self._pos = NULL
        self._free = NULL
        self._size = 0
        self._n_free = 0
        self._cap = 0
        self._next_seq = 0
        self._tasks = []
        self._slot_of = {}

    def __dealloc__(self):
        PyMem_Free(self._heap)
        PyMem_Free(self._pos)
        PyMem_Free(self._free)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t new_cap = 16 if self._cap == 0 else self._cap * 2
        cdef void* p
        if new_cap > PY_SSIZE_T_MAX // <Py_ssize_t>(2 * sizeof(_task_entry)):
            raise MemoryError("DelayedTaskQueue is too large")
        # Store each reallocated pointer at once: if a later one fails, the earlier arrays
        # are merely larger than _cap, which is harmless.
        p = PyMem_Realloc(self._heap, new_cap * sizeof(_task_entry))
        if p == NULL:
            raise MemoryError()
        self._heap = <_task_entry*>p
        p = PyMem_Realloc(self._pos, new_cap * sizeof(Py_ssize_t))
        if p == NULL:
            raise MemoryError()
        self._pos = <Py_ssize_t*>p
        p = PyMem_Realloc(self._free, new_cap * sizeof(Py_ssize_t))
        if p == NULL:
            raise MemoryError()
        self._free = <Py_ssize_t*>p
        self._cap = new_cap
        return 0

    cdef Py_ssize_t _sift_up(self, Py_ssize_t i) noexcept nogil:
        cdef _task_entry e = self._heap[i]
        cdef Py_ssize_t parent
        while i > 0:
            parent = (i - 1) >> 1
            if not _before(&e, &self._heap[parent]):
                break
            self._heap[i] = self._heap[parent]
            self._pos[self._heap[i].slot] = i
            i = parent
        self._heap[i] = e
        self._pos[e.slot] = i
        return i

    cdef Py_ssize_t _sift_down(self, Py_ssize_t i) noexcept nogil:
        cdef _task_entry e = self._heap[i]
        cdef Py_ssize_t n = self._size
        cdef Py_ssize_t child
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and _before(&self._heap[child + 1], &self._heap[child]):
                child += 1
            if not _before(&self._heap[child], &e):
                break
            self._heap[i] = self._heap[child]
            self._pos[self._heap[i].slot] = i
            i = child
        self._heap[i] = e
        self._pos[e.slot] = i
        return i

    cdef void _remove_at(self, Py_ssize_t i) noexcept nogil:
        self._size -= 1
        if i == self._size:
            return
        self._heap[i] = self._heap[self._size]
        self._pos[self._heap[i].slot] = i
        if self._sift_up(i) == i:
            self._sift_down(i)

    def add(self, task, at_ms):
        """Schedule ``task`` at ``at_ms`` (reschedules it if it is already queued)."""
        cdef Py_ssize_t slot, i
        cdef int64_t at = _ms(at_ms)
        key = <Py_ssize_t><void*>task
        found = self._slot_of.get(key)
        if found is not None:
            slot = found
            i = self._pos[slot]
            self._heap[i].deadline = at
            self._heap[i].seq = self._next_seq
            self._next_seq += 1
            if self._sift_up(i) == i:
                self._sift_down(i)
            return
        if self._size == self._cap:
            self._grow()
        # Pick the slot, then commit the Python containers before any C state changes, so
        # a MemoryError leaves the queue as it was.
        slot = self._free[self._n_free - 1] if self._n_free else len(self._tasks)
        self._slot_of[key] = slot
        if self._n_free:
            self._tasks[slot] = task
            self._n_free -= 1
        else:
            try:
                self._tasks.append(task)
            except BaseException:
                del self._slot_of[key]
                raise
        i = self._size
        self._heap[i].deadline = at
        self._heap[i].seq = self._next_seq
        self._heap[i].slot = slot
        self._next_seq += 1
        self._size += 1
        self._sift_up(i)

    def remove(self, task):
        """Unschedule ``task``; False if it was not queued."""
        found = self._slot_of.pop(<Py_ssize_t><void*>task, None)
        if found is None:
            return False
        cdef Py_ssize_t slot = found
        self._remove_at(self._pos[slot])
        self._release_slot(slot)
        return True

    cdef object _release_slot(self, Py_ssize_t slot):
        # Returns the task so the caller's reference outlives our bookkeeping: its
        # __del__ (if the queue held the last reference) must not see a half-updated queue.
        self._pos[slot] = -1
        self._free[self._n_free] = slot
        self._n_free += 1
        task = self._tasks[slot]
        self._tasks[slot] = None
        return task

    def next_deadline_ms(self):
        """Deadline of the earliest task, or None when empty."""
        if self._size == 0:
            return None
        return self._heap[0].deadline

    def deadline_of(self, task):
        """Deadline of ``task``, or None if it is not queued."""
        found = self._slot_of.get(<Py_ssize_t><void*>task)
        if found is None:
            return None
        cdef Py_ssize_t slot = found
        return self._heap[self._pos[slot]].deadline

    def pop_due(self, now_ms):
        """Remove and return every task with deadline <= now_ms, in (deadline, insertion) order."""
        cdef int64_t now = _ms(now_ms)
        cdef list out = []
        cdef Py_ssize_t slot
        while self._size and self._heap[0].deadline <= now:
            slot = self._heap[0].slot
            self._remove_at(0)
            task = self._release_slot(slot)
            del self._slot_of[<Py_ssize_t><void*>task]
            out.append(task)
        return out

    def clear(self):
        """Drop every task."""
        old = self._tasks
        self._tasks = []
        self._slot_of = {}
        self._size = 0
        self._n_free = 0
        del old   # last: task finalizers then see an empty, consistent queue

    def __len__(self):
        return self._size

    def __contains__(self, task):
        return (<Py_ssize_t><void*>task) in self._slot_of

    def __repr__(self):
        return f"DelayedTaskQueue(size={self._size}, next_deadline_ms={self.next_deadline_ms()})"

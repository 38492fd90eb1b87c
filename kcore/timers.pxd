# cython: language_level=3
"""C interface of kcore.timers: the delayed-task heap and the heartbeat timing state (mechanisms §3).

The heartbeat functions take a plain C struct and never touch a Python object, so a thread
that does not hold the GIL can drive heartbeat timing. They do no locking themselves:
the ``Heartbeat`` object's mutex guards its struct (its Python methods take it; a nogil caller
such as kcore.pacemaker takes it around every call). Fields are plain int64 stores.

Time conventions (shared with kcore.queues):
- all times are int64 milliseconds on one monotonic clock; they may be negative;
- "expired" means strictly more than the timeout has elapsed (Kafka's ``now - t > timeout``);
- every returned instant is the first ``now`` at which the condition holds, so a caller
  that waits ``max(0, instant - now)`` never wakes up one millisecond too early and spins;
- arithmetic saturates instead of wrapping; predicates and durations are exact for every
  int64 input (computed as elapsed times), returned instants saturate at INT64_MAX.
"""
from libc.stdint cimport int64_t, uint64_t
from kcore.posixsys cimport pthread_mutex_t

# last_heartbeat_send_ms / last_heartbeat_receive_ms hold HB_NEVER (INT64_MIN) until the
# first heartbeat; the arithmetic needs no special case (max(x, INT64_MIN) == x).
cdef extern from *:
    """
    #define KCORE_HB_NEVER INT64_MIN
    """
    const int64_t HB_NEVER "KCORE_HB_NEVER"

# Return codes of hb_init (0 = valid). The Python wrapper turns them into
# ConfigurationError naming the setting.
cdef enum:
    HB_OK = 0
    HB_BAD_SESSION_TIMEOUT = 1
    HB_BAD_HEARTBEAT_INTERVAL = 2
    HB_BAD_MAX_POLL_INTERVAL = 3
    HB_BAD_RETRY_BACKOFF = 4
    HB_INTERVAL_NOT_BELOW_SESSION = 5

ctypedef struct heartbeat_state:
    # configuration (validated by hb_init)
    int64_t session_timeout_ms       # 1 .. 2**31-1 (an INT config in Kafka)
    int64_t heartbeat_interval_ms    # 1 .. session_timeout_ms - 1
    int64_t max_poll_interval_ms     # 1 .. 2**31-1
    int64_t retry_backoff_ms         # 0 .. INT64_MAX (a LONG config in Kafka; 0 is allowed)
    # timing state
    int64_t last_heartbeat_send_ms
    int64_t last_heartbeat_receive_ms
    int64_t last_session_reset_ms
    int64_t last_poll_ms
    # When the heartbeat timer last restarted (send, failure or reset_timeouts); the next
    # heartbeat is due retry_backoff_ms (after a failure) or heartbeat_interval_ms later.
    # Kept as start + flag rather than a deadline so that no sum is ever stored saturated.
    int64_t heartbeat_timer_start_ms
    int heartbeat_failed

cdef int hb_init(heartbeat_state* s, int64_t session_timeout_ms, int64_t heartbeat_interval_ms,
                 int64_t max_poll_interval_ms, int64_t retry_backoff_ms,
                 int64_t now) noexcept nogil
cdef void hb_poll(heartbeat_state* s, int64_t now) noexcept nogil
cdef void hb_sent_heartbeat(heartbeat_state* s, int64_t now) noexcept nogil
cdef void hb_received_heartbeat(heartbeat_state* s, int64_t now) noexcept nogil
cdef void hb_fail_heartbeat(heartbeat_state* s, int64_t now) noexcept nogil
cdef void hb_reset_session_timeout(heartbeat_state* s, int64_t now) noexcept nogil
cdef void hb_reset_timeouts(heartbeat_state* s, int64_t now) noexcept nogil
cdef int64_t hb_time_to_next_heartbeat(const heartbeat_state* s, int64_t now) noexcept nogil
cdef bint hb_should_heartbeat(const heartbeat_state* s, int64_t now) noexcept nogil
cdef bint hb_session_timeout_expired(const heartbeat_state* s, int64_t now) noexcept nogil
cdef bint hb_poll_timeout_expired(const heartbeat_state* s, int64_t now) noexcept nogil
cdef int64_t hb_time_to_next_poll(const heartbeat_state* s, int64_t now) noexcept nogil
cdef int64_t hb_session_expiry_ms(const heartbeat_state* s) noexcept nogil
cdef int64_t hb_poll_expiry_ms(const heartbeat_state* s) noexcept nogil
cdef int64_t hb_next_heartbeat_ms(const heartbeat_state* s) noexcept nogil
cdef int64_t hb_next_wakeup_ms(const heartbeat_state* s, int64_t now) noexcept nogil


cdef class Heartbeat:
    cdef heartbeat_state state
    # Guards ``state``: every Python method takes it, and so does a nogil user (the pacemaker).
    # Never held across I/O or while waiting for the GIL, so it cannot deadlock with the GIL.
    cdef pthread_mutex_t mutex
    # For a Cython caller (e.g. a nogil heartbeat loop): valid while this object is alive.
    cdef heartbeat_state* state_ptr(self) noexcept


# One heap entry: compared by (deadline, seq) so equal deadlines keep insertion order.
ctypedef struct _task_entry:
    int64_t deadline
    uint64_t seq
    Py_ssize_t slot     # index into DelayedTaskQueue._tasks / _pos


cdef class DelayedTaskQueue:
    cdef _task_entry* _heap     # binary min-heap, _size entries in use
    cdef Py_ssize_t* _pos       # slot -> index in _heap (-1 when the slot is free)
    cdef Py_ssize_t* _free      # stack of free slots
    cdef Py_ssize_t _size
    cdef Py_ssize_t _n_free
    cdef Py_ssize_t _cap        # capacity of _heap, _pos and _free (slots never exceed it)
    cdef uint64_t _next_seq
    cdef list _tasks            # slot -> task (None when free); keeps the task alive
    cdef dict _slot_of          # id(task) -> slot

    cdef int _grow(self) except -1
    cdef Py_ssize_t _sift_up(self, Py_ssize_t i) noexcept nogil
    cdef Py_ssize_t _sift_down(self, Py_ssize_t i) noexcept nogil
    cdef void _remove_at(self, Py_ssize_t i) noexcept nogil
    cdef object _release_slot(self, Py_ssize_t slot)

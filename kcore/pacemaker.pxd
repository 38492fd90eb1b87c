# cython: language_level=3
"""C interface of kcore.pacemaker: the GIL-free heartbeat sender (mechanisms §2).

The run loop (``Pacemaker._loop``) runs entirely without the GIL: it owns one TCP connection
to the group coordinator, encodes Heartbeat (and, when max.poll.interval.ms expires,
LeaveGroup) requests, or KIP-848 ConsumerGroupHeartbeat ones, or KIP-932 ShareGroupHeartbeat
ones, and decodes the responses with
kcore.groupcodec, and drives the shared ``kcore.timers.Heartbeat``
struct under that object's mutex. It never calls into Python; it reports what happened as
small events that Python code drains (``wait_events`` / ``take_events``).
"""
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t

from kcore.posixsys cimport pthread_cond_t, pthread_mutex_t
from kcore.sasl cimport sasl_creds
from kcore.timers cimport Heartbeat, heartbeat_state
from kcore.transport cimport tp_conn

cdef enum:
    PM_EVENT_CAP = 64          # events kept until Python drains them (older ones are counted, dropped)
    PM_SEND_TIMES = 256        # recent heartbeat send instants kept for jitter measurement
    PM_MAX_HOST = 255
    PM_RECV_CAP = 65536        # largest response frame accepted (a Heartbeat response is ~20 bytes)

ctypedef struct pm_event:
    int kind
    int code
    int64_t epoch
    int32_t generation
    int64_t at_ms
    int64_t detail


cdef class Pacemaker:
    cdef Heartbeat hb                  # keeps the shared timing state alive
    cdef heartbeat_state* hs
    cdef pthread_mutex_t* hmu          # hb's mutex; always taken after mu, never before
    cdef pthread_mutex_t mu            # guards everything below
    cdef pthread_cond_t ev_cond        # event posted / waiter woken
    cdef int wake_r, wake_w            # self-pipe: wakes the loop out of poll()
    cdef bint mu_ready
    # configuration (Python side, via configure / deactivate)
    cdef char* client_id
    cdef Py_ssize_t client_id_len
    cdef char* group_id
    cdef Py_ssize_t group_id_len
    cdef char* member_id
    cdef Py_ssize_t member_id_len
    cdef char* instance_id
    cdef Py_ssize_t instance_id_len    # -1: null (dynamic member)
    cdef char host[256]
    cdef int port
    cdef int64_t addr_gen              # bumped when host/port change: the loop reconnects
    cdef int32_t generation
    cdef int hb_version
    cdef int leave_version             # -1: do not send LeaveGroup on poll timeout
    cdef bint consumer_mode            # KIP-848: ConsumerGroupHeartbeat; generation is the member epoch,
                                       # which the loop advances from the answers
    cdef bint share_mode               # KIP-932 (with consumer_mode): ShareGroupHeartbeat, no poll bound
    cdef int64_t assign_seq            # consumer mode: answers that carried an assignment so far
    cdef int64_t assign_taken          # ... and the last one Python took
    cdef uint8_t* abuf                 # consumer mode: the latest such answer (frame, no size prefix)
    cdef Py_ssize_t abuf_len
    cdef int abuf_version
    cdef int64_t request_timeout_ms
    # security of the connection (set_security / set_sasl_*): TLS context, SASL credentials
    cdef list tls_contexts             # every kcore.tls.TlsContext given, kept alive: a loop in the
                                       # middle of a connect may still use an earlier one's SSL_CTX
    cdef void* ssl_ctx                 # its SSL_CTX*; NULL: plain TCP
    cdef bint check_host
    cdef sasl_creds creds              # mechanism SASL_NONE: no SASL
    cdef char last_error[256]          # why the last connection set-up failed (TLS or SASL)
    cdef int64_t n_auths               # SASL exchanges completed (statistics, tests)
    cdef readonly int64_t epoch        # bumped by every configure/deactivate; events carry it
    cdef bint active                   # Python wants heartbeats
    cdef bint halted                   # the loop stopped itself until the next configure
    cdef bint stop
    cdef bint running
    cdef int64_t waiter_wakes
    # events and statistics
    cdef pm_event events[64]
    cdef int ev_head
    cdef int ev_count
    cdef int64_t ev_dropped
    cdef int64_t n_sent, n_received, n_failed, n_connects
    cdef int64_t send_times[256]
    cdef int64_t n_send_times
    # buffers of the loop thread
    cdef uint8_t* sbuf
    cdef uint8_t* rbuf

    cdef object _configure(self, host, port, group_id, member_id, generation_id, group_instance_id, int version,
                           int leave_version, request_timeout_ms, bint consumer_mode)
    cdef void _set_share_mode(self, bint share) noexcept
    cdef void _post(self, int kind, int code, int32_t generation, int64_t at_ms, int64_t detail) noexcept nogil
    cdef void _wake_loop(self) noexcept nogil
    cdef void _idle_wait(self, int64_t ms) noexcept nogil
    cdef int _recv_frame(self, tp_conn* conn, Py_ssize_t* n_out, int64_t deadline, int64_t epoch0) noexcept nogil
    cdef int _exchange(self, tp_conn* conn, Py_ssize_t n, Py_ssize_t* rn, int64_t deadline,
                       int64_t epoch0) noexcept nogil
    cdef int _connect(self, tp_conn* conn, int64_t timeout_ms, int32_t* corr, int64_t* reauth_at) noexcept nogil
    cdef void _set_error(self, const char* why, tp_conn* conn) noexcept nogil
    cdef void _loop(self) noexcept nogil
    cdef void _handle_heartbeat_error(self, int16_t code, int32_t gen0, int64_t now) noexcept nogil
    cdef void _handle_consumer_answer(self, int16_t code, int32_t gen0, int32_t new_epoch, int32_t interval,
                                      bint has_assignment, Py_ssize_t rn, int version, int64_t now) noexcept nogil

# cython: language_level=3
"""A heartbeat sender that runs without the GIL (mechanisms §2).

Why: a Python heartbeat thread cannot run while the application holds the GIL (a long C
call), so a member whose C call outlasts session.timeout.ms is evicted. ``Pacemaker.run()``
releases the GIL for its whole life and keeps the member alive with its own coordinator
connection (kcore.transport: connect, send a request, receive its answer). It speaks the classic protocol's Heartbeat (versions 0-4) and LeaveGroup
(0-5) in C (kcore.groupcodec), or, configured with ``configure_consumer()``, KIP-848's
ConsumerGroupHeartbeat (0-1) in its short "nothing changed" form; the version is the one the
main client negotiated with the coordinator.

Consumer mode. The member epoch is the loop's to advance while it is engaged: every answer
names the epoch the next heartbeat must carry, and a heartbeat with a stale one is fenced. An
answer that carries an assignment (or a new epoch) is kept whole (``take_assignment()``) and
announced with an EV_ASSIGNMENT event; the Python coordinator decodes it with the
schema-driven codec, reconciles at the application's next poll, and sends the full heartbeat
that acknowledges it itself (after ``deactivate()``). Meanwhile the loop goes on heartbeating
with the newest epoch, which is what keeps a member alive while its application holds the
GIL during a rebalance. When max.poll.interval.ms expires it sends the leave heartbeat
(epoch -1; -2 for a static member, whose partitions then wait for it).

Share mode (``configure_share()``, KIP-932): consumer mode's rules with ShareGroupHeartbeat
(version 1) in its short form (group, member, epoch; rack and subscription "unchanged"). The
epoch is the loop's to advance, an answer with an assignment is kept for ``take_assignment()``
and announced with EV_ASSIGNMENT, exactly as in consumer mode. A share member has no poll
bound: the loop never leaves on its own; the Python side sends the leave (epoch -1) when
the consumer closes, after ``deactivate()``.

Division of labour. The caller (the group coordinator) decides *whether* to heartbeat and
with which identity: ``configure()`` (coordinator address, member id, generation, group
instance id, versions) and ``deactivate()``. The loop decides *when*, from the shared
``kcore.timers.Heartbeat`` struct (the one the Python coordinator reads), and does the
I/O. Whatever needs the coordinator's Python state (a rejoin, a generation reset, a
coordinator lookup) is posted as an event; Python drains them with ``wait_events`` (a
thread parked without the GIL) or ``take_events`` (the application's next poll).

The loop halts itself (no more heartbeats until the next ``configure``) when the member is
out of the group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, fatal errors),
when the coordinator is wrong or lost (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
session.timeout.ms without a response), and after max.poll.interval.ms expired (it then
sends LeaveGroup itself for a dynamic member, as mechanisms §2 step 5 says). A broken connection
is not a halt: it reconnects to the same address after retry.backoff.ms.

Locks: ``mu`` guards this object's fields, ``Heartbeat.mutex`` the timing struct; the order
is always mu then hb mutex. Neither is held during I/O, and the loop never takes the GIL.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.stdio cimport snprintf
from libc.string cimport memcpy, strlen

from kcore.posixsys cimport (
    CLOCK_MONOTONIC, POLLIN, close, errno, monotonic_ms, poll, pollfd, pthread_cond_broadcast,
    pthread_cond_destroy, pthread_cond_init, pthread_cond_timedwait, pthread_condattr_destroy,
    pthread_condattr_init, pthread_condattr_setclock, pthread_condattr_t, pthread_mutex_destroy,
    pthread_mutex_init, pthread_mutex_lock, pthread_mutex_unlock, read, timespec, write)
from kcore.timers cimport (
    Heartbeat, hb_fail_heartbeat, hb_next_heartbeat_ms, hb_next_wakeup_ms, hb_poll_timeout_expired,
    hb_received_heartbeat, hb_poll_expiry_ms, hb_sent_heartbeat, hb_session_expiry_ms, hb_session_timeout_expired,
    hb_should_heartbeat, heartbeat_state)
from kcore.groupcodec cimport (
    PM_ABANDONED, PM_CONNECT_FAILED, PM_CORRELATION, PM_IO, PM_OK, PM_OVERFLOW, PM_SBUF_CAP,
    PM_TIMEOUT, PM_TOO_BIG, check_version, pm_decode_consumer_group_heartbeat_response,
    pm_decode_heartbeat_response, pm_decode_leave_group_response, pm_decode_share_group_heartbeat_response,
    pm_encode_consumer_group_heartbeat, pm_encode_heartbeat, pm_encode_leave_group, pm_encode_share_group_heartbeat,
    utf8_arg)
from kcore.sasl cimport (
    SASL_NONE, SASL_OAUTHBEARER, SASL_OK, sasl_authenticate, sasl_creds, sasl_creds_clear, sasl_creds_clear_message,
    sasl_creds_copy)
from kcore.tls cimport TlsContext
from kcore.transport cimport (
    TP_OK, TP_TIMEOUT, TP_TOO_BIG, TP_WOKEN, tp_close, tp_conn, tp_connect, tp_frame, tp_frame_start, tp_init,
    tp_pipe, tp_recv_frame, tp_send_all, tp_start_tls)

from kcore.sasl import MAX_SASL_AUTHENTICATE_VERSION, MECHANISMS as _SASL_MECHANISMS

__all__ = [
    "Pacemaker", "MAX_HEARTBEAT_VERSION", "MAX_LEAVE_GROUP_VERSION", "MAX_CONSUMER_GROUP_HEARTBEAT_VERSION",
    "MAX_SHARE_GROUP_HEARTBEAT_VERSION",
    "EV_HEARTBEAT_ERROR", "EV_COORDINATOR_LOST", "EV_POLL_TIMEOUT", "EV_DISCONNECTED", "EV_ASSIGNMENT",
    "CODE_SESSION_EXPIRED", "CODE_NOT_SENT", "CODE_CONNECT_FAILED",
]

# The versions the loop speaks (those of kcore.groupcodec).
MAX_HEARTBEAT_VERSION = 4
MAX_LEAVE_GROUP_VERSION = 5
MAX_CONSUMER_GROUP_HEARTBEAT_VERSION = 1
MAX_SHARE_GROUP_HEARTBEAT_VERSION = 1

# Event kinds (tuple field 0 of wait_events / take_events).
cdef enum:
    _EV_HEARTBEAT_ERROR = 1     # code: the Kafka error code a Heartbeat answered (not 0)
    _EV_COORDINATOR_LOST = 2    # code: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, or CODE_SESSION_EXPIRED
    _EV_POLL_TIMEOUT = 3        # code: LeaveGroup's error code (0 = left), or CODE_NOT_SENT; detail: ms since poll
    _EV_DISCONNECTED = 4        # code: a PM_* I/O result; detail: errno (informational: the loop reconnects)
    _EV_ASSIGNMENT = 5          # consumer and share modes: generation: the new member epoch; detail: the answer's
                                # sequence number (take_assignment), 0 if it carried no assignment
    _CODE_SESSION_EXPIRED = -1
    _CODE_NOT_SENT = -2

EV_HEARTBEAT_ERROR = _EV_HEARTBEAT_ERROR
EV_COORDINATOR_LOST = _EV_COORDINATOR_LOST
EV_POLL_TIMEOUT = _EV_POLL_TIMEOUT
EV_DISCONNECTED = _EV_DISCONNECTED
EV_ASSIGNMENT = _EV_ASSIGNMENT
CODE_SESSION_EXPIRED = _CODE_SESSION_EXPIRED
CODE_NOT_SENT = _CODE_NOT_SENT
CODE_CONNECT_FAILED = PM_CONNECT_FAILED    # EV_DISCONNECTED: could not connect (detail: errno)

cdef enum:
    # Kafka error codes the loop acts on
    _E_COORDINATOR_LOAD_IN_PROGRESS = 14
    _E_COORDINATOR_NOT_AVAILABLE = 15
    _E_NOT_COORDINATOR = 16
    _E_ILLEGAL_GENERATION = 22
    _E_UNKNOWN_MEMBER_ID = 25
    _E_REBALANCE_IN_PROGRESS = 27
    _E_GROUP_AUTHORIZATION_FAILED = 30
    _E_UNSUPPORTED_VERSION = 35
    _E_FENCED_INSTANCE_ID = 82
    _LEAVE_EPOCH = -1           # KIP-848: a dynamic member leaves
    _STATIC_LEAVE_EPOCH = -2    # KIP-848: a static member leaves for now (its partitions wait)

cdef const char* _LEAVE_REASON = b"max.poll.interval.ms expired: the application did not call poll() in time"


cdef char* _dup(bytes b, Py_ssize_t* n_out) except? NULL:
    """malloc'ed copy of b (NULL and length -1 for None)."""
    cdef char* p
    if b is None:
        n_out[0] = -1
        return NULL
    n_out[0] = len(b)
    p = <char*>malloc(len(b) + 1)
    if p == NULL:
        raise MemoryError()
    memcpy(p, PyBytes_AS_STRING(b), len(b))
    p[len(b)] = 0
    return p


cdef inline int memcmp_(const char* a, const char* b, Py_ssize_t n) noexcept:
    cdef Py_ssize_t k
    for k in range(n):
        if a[k] != b[k]:
            return 1
    return 0


cdef inline int _io_result(int rc) noexcept nogil:
    """The loop's result for a transport one (an end of stream or a refused size prefix is
    an I/O failure like the others: the connection is closed and opened again)."""
    if rc == TP_OK:
        return PM_OK
    if rc == TP_TIMEOUT:
        return PM_TIMEOUT
    if rc == TP_TOO_BIG:
        return PM_TOO_BIG
    return PM_IO


cdef class Pacemaker:
    """GIL-free heartbeat loop for one group member; see the module docstring.

    ``Pacemaker(heartbeat, client_id)``: ``heartbeat`` is the coordinator's
    ``kcore.timers.Heartbeat`` (shared, not copied). Start ``run()`` in a dedicated thread.
    """

    def __cinit__(self, *args, **kwargs):
        # The mutex exists from allocation on, so no method can touch an uninitialised one.
        cdef pthread_condattr_t attr
        self.wake_r = -1
        self.wake_w = -1
        self.instance_id_len = -1
        self.client_id_len = -1
        self.leave_version = -1
        self.port = 0
        self.host[0] = 0
        self.request_timeout_ms = 30000
        pthread_mutex_init(&self.mu, NULL)
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(&self.ev_cond, &attr)
        pthread_condattr_destroy(&attr)
        self.mu_ready = True

    def __init__(self, Heartbeat heartbeat not None, client_id=None):
        cdef int fds[2]
        cdef bytes cid = utf8_arg(client_id, "client_id", True)
        if self.hb is not None:
            raise RuntimeError("Pacemaker is already initialised")
        self.sbuf = <uint8_t*>malloc(PM_SBUF_CAP)
        self.rbuf = <uint8_t*>malloc(PM_RECV_CAP)
        self.abuf = <uint8_t*>malloc(PM_RECV_CAP)
        if self.sbuf == NULL or self.rbuf == NULL or self.abuf == NULL:
            raise MemoryError()
        if tp_pipe(fds) != 0:
            raise OSError(errno, "pipe() failed for the pacemaker's wake-up channel")
        self.wake_r = fds[0]
        self.wake_w = fds[1]
        self.client_id = _dup(cid, &self.client_id_len)
        self.hs = heartbeat.state_ptr()
        self.hmu = &heartbeat.mutex
        self.hb = heartbeat              # last: "initialised" means every resource above exists

    def __dealloc__(self):
        # run() holds a reference to self, so the loop has ended by now.
        if self.mu_ready:
            pthread_mutex_destroy(&self.mu)
            pthread_cond_destroy(&self.ev_cond)
        if self.wake_r >= 0:
            close(self.wake_r)
        if self.wake_w >= 0:
            close(self.wake_w)
        free(self.client_id)
        free(self.group_id)
        free(self.member_id)
        free(self.instance_id)
        free(self.sbuf)
        free(self.rbuf)
        free(self.abuf)
        sasl_creds_clear(&self.creds)

    # ------------------------------------------------------------ control (Python side)
    def configure(self, *, host, port, group_id, member_id, generation_id, group_instance_id=None,
                  heartbeat_version, leave_group_version=None, request_timeout_ms=30000):
        """Heartbeat as this member to this coordinator from now on; returns the new epoch.

        Events carry the epoch they belong to, so the caller can drop events of an older
        configuration. A changed address closes the connection and opens a new one.
        ``leave_group_version`` None: never send LeaveGroup (static members, or no version).
        """
        if self.hb is None:
            raise RuntimeError("Pacemaker.__init__ was not called")
        check_version(heartbeat_version, 4, "Heartbeat")
        if leave_group_version is not None:
            check_version(leave_group_version, 5, "LeaveGroup")
        self._set_share_mode(False)
        return self._configure(host, port, group_id, member_id, generation_id, group_instance_id,
                               heartbeat_version, -1 if leave_group_version is None else leave_group_version,
                               request_timeout_ms, False)

    def configure_consumer(self, *, host, port, group_id, member_id, member_epoch, group_instance_id=None,
                           version, request_timeout_ms=30000):
        """KIP-848: heartbeat as this member (ConsumerGroupHeartbeat ``version``) at
        ``member_epoch`` from now on; the loop advances the epoch from the answers (see the
        module doc). Returns the new configuration epoch, as ``configure`` does."""
        if self.hb is None:
            raise RuntimeError("Pacemaker.__init__ was not called")
        check_version(version, 1, "ConsumerGroupHeartbeat")
        if not isinstance(member_epoch, int) or member_epoch < 1:
            raise ValueError(f"member_epoch must be >= 1: a member in the group (got {member_epoch!r})")
        self._set_share_mode(False)
        return self._configure(host, port, group_id, member_id, member_epoch, group_instance_id, version, 0,
                               request_timeout_ms, True)

    def configure_share(self, *, host, port, group_id, member_id, member_epoch, version, request_timeout_ms=30000):
        """KIP-932: heartbeat as this share member (ShareGroupHeartbeat ``version``) at
        ``member_epoch`` from now on; the loop advances the epoch from the answers, as in
        consumer mode. Returns the new configuration epoch."""
        if self.hb is None:
            raise RuntimeError("Pacemaker.__init__ was not called")
        check_version(version, 1, "ShareGroupHeartbeat")
        if version < 1:
            raise ValueError("ShareGroupHeartbeat version 0 (Kafka 4.0's early access) is not supported (1..1)")
        if not isinstance(member_epoch, int) or member_epoch < 1:
            raise ValueError(f"member_epoch must be >= 1: a member in the group (got {member_epoch!r})")
        self._set_share_mode(True)
        return self._configure(host, port, group_id, member_id, member_epoch, None, version, 0,
                               request_timeout_ms, True)

    cdef void _set_share_mode(self, bint share) noexcept:
        # Before _configure, which activates the loop: its first heartbeat is of the new kind.
        pthread_mutex_lock(&self.mu)
        if self.share_mode != share:
            self.share_mode = share
            self.active = False
        pthread_mutex_unlock(&self.mu)

    cdef object _configure(self, host, port, group_id, member_id, generation_id, group_instance_id, int version,
                           int leave_version, request_timeout_ms, bint consumer_mode):
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"coordinator port must be 1..65535 (got {port!r})")
        cdef bytes h = utf8_arg(host, "host", False)
        if len(h) == 0 or len(h) > PM_MAX_HOST or b"\0" in h:
            raise ValueError(f"coordinator host {host!r} is not a valid host name")
        cdef bytes g = utf8_arg(group_id, "group_id", False)
        cdef bytes m = utf8_arg(member_id, "member_id", False)
        cdef bytes i = utf8_arg(group_instance_id, "group_instance_id", True)
        cdef int32_t gen = generation_id
        if request_timeout_ms is None or request_timeout_ms < 1:
            raise ValueError(f"request_timeout_ms must be >= 1 (got {request_timeout_ms!r})")
        cdef int64_t rto = request_timeout_ms
        cdef Py_ssize_t glen = 0, mlen = 0, ilen = -1
        cdef char* gp = _dup(g, &glen)
        cdef char* mp = _dup(m, &mlen)
        cdef char* ip = _dup(i, &ilen)
        cdef int64_t epoch
        # Held with the GIL: the loop never waits for the GIL while holding mu.
        pthread_mutex_lock(&self.mu)
        free(self.group_id)
        free(self.member_id)
        free(self.instance_id)
        self.group_id, self.group_id_len = gp, glen
        self.member_id, self.member_id_len = mp, mlen
        self.instance_id, self.instance_id_len = ip, ilen
        if <size_t>len(h) != strlen(self.host) or memcmp_(self.host, PyBytes_AS_STRING(h), len(h)) or self.port != port:
            memcpy(self.host, PyBytes_AS_STRING(h), len(h))
            self.host[len(h)] = 0
            self.port = port
            self.addr_gen += 1
        self.generation = gen
        self.hb_version = version
        self.leave_version = leave_version
        self.consumer_mode = consumer_mode
        self.request_timeout_ms = rto
        self.epoch += 1
        epoch = self.epoch
        self.active = True
        self.halted = False
        pthread_mutex_unlock(&self.mu)
        self._wake_loop()
        return epoch

    def deactivate(self):
        """Stop heartbeating (the member left or is rejoining); closes the connection. Returns the epoch."""
        cdef int64_t epoch
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.active = False
            self.epoch += 1
            epoch = self.epoch
            pthread_mutex_unlock(&self.mu)
            self._wake_loop()
        return epoch

    def close(self):
        """End run() (idempotent); wakes every waiter."""
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.stop = True
            self.active = False
            pthread_cond_broadcast(&self.ev_cond)
            pthread_mutex_unlock(&self.mu)
            self._wake_loop()

    def set_security(self, *, tls=None, sasl_mechanism=None, username=None, password=None,
                     sasl_authenticate_version=0):
        """How the connection is secured from its next (re)connect on: ``tls`` a
        kcore.tls.TlsContext (None: plain TCP), ``sasl_mechanism`` one of PLAIN,
        SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (None: no SASL) with the user's
        credentials, or, for OAUTHBEARER, the token given to ``set_sasl_token``. The
        current connection is closed so the next one uses them."""
        cdef int mech = SASL_NONE
        cdef sasl_creds fresh
        cdef bytes user = None, pw = None
        if tls is not None and not isinstance(tls, TlsContext):
            raise TypeError("tls must be a kcore.tls.TlsContext or None")
        if sasl_mechanism is not None:
            if sasl_mechanism not in _SASL_MECHANISMS:
                raise ValueError(f"SASL mechanism {sasl_mechanism!r} is not one of {sorted(_SASL_MECHANISMS)}")
            mech = _SASL_MECHANISMS[sasl_mechanism]
            if mech != SASL_OAUTHBEARER:
                if not username or password is None:
                    raise ValueError(f"SASL mechanism {sasl_mechanism} needs a username and a password")
                user = utf8_arg(username, "username", False)
                pw = utf8_arg(password, "password", False)
        check_version(sasl_authenticate_version, MAX_SASL_AUTHENTICATE_VERSION, "SaslAuthenticate")
        fresh.mechanism = mech
        fresh.authenticate_version = sasl_authenticate_version
        fresh.username = _dup(user, &fresh.username_len)
        fresh.password = _dup(pw, &fresh.password_len)
        fresh.oauth_message = NULL
        fresh.oauth_message_len = 0
        pthread_mutex_lock(&self.mu)
        if self.creds.mechanism == mech and mech == SASL_OAUTHBEARER:
            fresh.oauth_message, self.creds.oauth_message = self.creds.oauth_message, NULL   # keep the token
            fresh.oauth_message_len, self.creds.oauth_message_len = self.creds.oauth_message_len, 0
        sasl_creds_clear(&self.creds)
        self.creds = fresh
        if tls is not None:
            if self.tls_contexts is None:
                self.tls_contexts = []
            if tls not in self.tls_contexts:
                self.tls_contexts.append(tls)
        self.ssl_ctx = NULL if tls is None else (<TlsContext>tls).ctx
        self.check_host = False if tls is None else (<TlsContext>tls).check_hostname
        self.addr_gen += 1           # reconnect with the new security
        pthread_mutex_unlock(&self.mu)
        self._wake_loop()

    def set_sasl_authenticate_version(self, version):
        """The SaslAuthenticate version the main client negotiated with the coordinator."""
        check_version(version, MAX_SASL_AUTHENTICATE_VERSION, "SaslAuthenticate")
        pthread_mutex_lock(&self.mu)
        self.creds.authenticate_version = version
        pthread_mutex_unlock(&self.mu)

    def set_sasl_token(self, token, extensions=None):
        """OAUTHBEARER: the bearer token (and SASL extensions) for the next (re)connect; the
        current session goes on until it ends or must be re-authenticated."""
        cdef bytes msg
        cdef char* p
        cdef Py_ssize_t n = 0
        if not isinstance(token, str) or not token:
            raise ValueError("the token must be a non-empty str")
        extra = "".join(f"\x01{k}={v}" for k, v in (extensions or {}).items())
        msg = f"n,,\x01auth=Bearer {token}{extra}\x01\x01".encode()
        p = _dup(msg, &n)
        pthread_mutex_lock(&self.mu)
        sasl_creds_clear_message(&self.creds)
        self.creds.oauth_message = p
        self.creds.oauth_message_len = n
        pthread_mutex_unlock(&self.mu)

    @property
    def last_error(self):
        """Why the last TLS handshake or SASL exchange failed ('' if none did)."""
        pthread_mutex_lock(&self.mu)
        cdef bytes b = self.last_error
        pthread_mutex_unlock(&self.mu)
        return b.decode("utf-8", "replace")

    def wake(self):
        """Make a wait_events() in progress return now (with whatever events there are)."""
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.waiter_wakes += 1
            pthread_cond_broadcast(&self.ev_cond)
            pthread_mutex_unlock(&self.mu)

    def run(self):
        """The loop: returns after close(). Call it from a dedicated (daemon) thread."""
        if self.hb is None:
            raise RuntimeError("Pacemaker.__init__ was not called")
        with nogil:
            pthread_mutex_lock(&self.mu)
            if self.running or self.stop:
                pthread_mutex_unlock(&self.mu)
                with gil:
                    raise RuntimeError("Pacemaker.run() is already running or the pacemaker is closed")
            self.running = True
            pthread_mutex_unlock(&self.mu)
            self._loop()

    # ------------------------------------------------------------ events
    def take_events(self):
        """Drain posted events: a list of (kind, code, epoch, generation, at_ms, detail)."""
        return self._drain(0, False)

    def wait_events(self, timeout_ms):
        """Wait (without the GIL) until an event is posted, wake()/close() is called, or timeout_ms
        passes; then drain the events as take_events() does."""
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0 (got {timeout_ms})")
        return self._drain(timeout_ms, True)

    def _drain(self, int64_t timeout_ms, bint wait):
        cdef pm_event out[64]
        cdef int n = 0, k
        cdef int64_t deadline, wakes
        cdef timespec ts
        with nogil:
            pthread_mutex_lock(&self.mu)
            if wait:
                wakes = self.waiter_wakes
                deadline = monotonic_ms() + timeout_ms
                while self.ev_count == 0 and not self.stop and self.waiter_wakes == wakes:
                    if monotonic_ms() >= deadline:
                        break
                    ts.tv_sec = deadline // 1000
                    ts.tv_nsec = (deadline % 1000) * 1000000
                    pthread_cond_timedwait(&self.ev_cond, &self.mu, &ts)
            while self.ev_count > 0:
                out[n] = self.events[self.ev_head]
                self.ev_head = (self.ev_head + 1) % PM_EVENT_CAP
                self.ev_count -= 1
                n += 1
            pthread_mutex_unlock(&self.mu)
        return [(out[k].kind, out[k].code, out[k].epoch, out[k].generation, out[k].at_ms, out[k].detail)
                for k in range(n)]

    # ------------------------------------------------------------ introspection
    @property
    def is_running(self):
        return bool(self.running)

    @property
    def is_active(self):
        """Heartbeating (configured, not deactivated, not halted by the loop)."""
        pthread_mutex_lock(&self.mu)
        cdef bint r = self.active and not self.halted and not self.stop
        pthread_mutex_unlock(&self.mu)
        return r

    @property
    def member_epoch(self):
        """Consumer and share modes: the epoch the next heartbeat carries (advanced by the answers)."""
        pthread_mutex_lock(&self.mu)
        cdef int32_t e = self.generation
        pthread_mutex_unlock(&self.mu)
        return e

    def take_assignment(self):
        """Consumer and share modes: (sequence, version, frame) of the newest answer that carried an
        assignment, once (None when there is nothing newer than what was taken). The frame is
        the response without its size prefix, for the schema-driven codec."""
        cdef int64_t seq
        cdef int version
        cdef bytes frame
        pthread_mutex_lock(&self.mu)
        if self.assign_seq == self.assign_taken:
            pthread_mutex_unlock(&self.mu)
            return None
        seq = self.assign_seq
        version = self.abuf_version
        try:
            frame = PyBytes_FromStringAndSize(<char*>self.abuf, self.abuf_len)
        finally:
            pthread_mutex_unlock(&self.mu)
        self.assign_taken = seq
        return seq, version, frame

    def stats(self):
        """Counters: sent, received, failed, connects, events_dropped."""
        pthread_mutex_lock(&self.mu)
        d = (self.n_sent, self.n_received, self.n_failed, self.n_connects, self.ev_dropped, self.n_auths)
        pthread_mutex_unlock(&self.mu)
        return dict(zip(("sent", "received", "failed", "connects", "events_dropped", "authentications"), d))

    def send_times_ms(self):
        """Monotonic instants of the most recent heartbeats sent (up to 256, oldest first)."""
        cdef int64_t copy[256]
        cdef int64_t n, k, start
        pthread_mutex_lock(&self.mu)
        n = self.n_send_times if self.n_send_times < PM_SEND_TIMES else PM_SEND_TIMES
        start = self.n_send_times - n
        for k in range(n):
            copy[k] = self.send_times[(start + k) % PM_SEND_TIMES]
        pthread_mutex_unlock(&self.mu)
        return [copy[k] for k in range(n)]

    # ------------------------------------------------------------ loop internals (nogil)
    cdef void _post(self, int kind, int code, int32_t generation, int64_t at_ms, int64_t detail) noexcept nogil:
        # caller holds mu
        cdef int slot
        if self.ev_count == PM_EVENT_CAP:   # keep the newest: drop the oldest
            self.ev_head = (self.ev_head + 1) % PM_EVENT_CAP
            self.ev_count -= 1
            self.ev_dropped += 1
        slot = (self.ev_head + self.ev_count) % PM_EVENT_CAP
        self.events[slot].kind = kind
        self.events[slot].code = code
        self.events[slot].epoch = self.epoch
        self.events[slot].generation = generation
        self.events[slot].at_ms = at_ms
        self.events[slot].detail = detail
        self.ev_count += 1
        pthread_cond_broadcast(&self.ev_cond)

    cdef void _wake_loop(self) noexcept nogil:
        cdef char c = 1
        if self.wake_w >= 0:
            write(self.wake_w, &c, 1)    # a full pipe already means "wake up"

    cdef void _idle_wait(self, int64_t ms) noexcept nogil:
        cdef pollfd pfd
        cdef char drain[64]
        pfd.fd = self.wake_r
        pfd.events = POLLIN
        pfd.revents = 0
        if ms > INT32_MAX:
            ms = INT32_MAX
        poll(&pfd, 1, <int>ms)        # ms < 0: until woken
        if pfd.revents & POLLIN:
            while read(self.wake_r, drain, 64) > 0:
                pass

    cdef int _recv_frame(self, tp_conn* conn, Py_ssize_t* n_out, int64_t deadline, int64_t epoch0) noexcept nogil:
        """Read one response frame into rbuf (without its size prefix); a wake-up that
        reconfigured or stopped the loop abandons it."""
        cdef tp_frame f
        cdef char drain[64]
        cdef bint changed
        cdef int rc
        tp_frame_start(&f)
        while True:
            rc = tp_recv_frame(conn, &f, self.rbuf, PM_RECV_CAP, deadline, self.wake_r)
            if rc != TP_WOKEN:
                break
            while read(self.wake_r, drain, 64) > 0:
                pass
            pthread_mutex_lock(&self.mu)
            changed = self.stop or self.epoch != epoch0
            pthread_mutex_unlock(&self.mu)
            if changed:
                return PM_ABANDONED
        if rc == TP_OK:
            n_out[0] = f.size
        return _io_result(rc)

    cdef int _exchange(self, tp_conn* conn, Py_ssize_t n, Py_ssize_t* rn, int64_t deadline,
                       int64_t epoch0) noexcept nogil:
        cdef int rc = tp_send_all(conn, self.sbuf, n, deadline)
        if rc != TP_OK:
            return _io_result(rc)
        return self._recv_frame(conn, rn, deadline, epoch0)

    cdef int _connect(self, tp_conn* conn, int64_t timeout_ms, int32_t* corr, int64_t* reauth_at) noexcept nogil:
        """Connect to the configured address (copied under mu), then run the TLS handshake
        and the SASL exchange when configured, all within timeout_ms: PM_OK or
        PM_CONNECT_FAILED (conn.err: the errno of a TCP failure; last_error: why TLS or
        SASL failed). reauth_at: when the broker ends the session (KIP-368) less a margin
        for a new one, 0 for never."""
        cdef char host[256]
        cdef char why[256]
        cdef int port, rc
        cdef void* ctx
        cdef bint check
        cdef sasl_creds creds
        cdef int64_t deadline = monotonic_ms() + timeout_ms, lifetime = 0
        reauth_at[0] = 0
        pthread_mutex_lock(&self.mu)
        self.last_error[0] = 0
        memcpy(host, self.host, 256)
        port = self.port
        ctx = self.ssl_ctx
        check = self.check_host
        rc = sasl_creds_copy(&creds, &self.creds)
        pthread_mutex_unlock(&self.mu)
        if rc != 0:
            return PM_CONNECT_FAILED
        why[0] = 0
        try:
            if tp_connect(conn, host, port, timeout_ms) != TP_OK:
                return PM_CONNECT_FAILED
            if ctx != NULL:
                rc = tp_start_tls(conn, ctx, host, check, deadline, why, sizeof(why))
                if rc != TP_OK:
                    self._set_error(why, conn)
                    return PM_CONNECT_FAILED
            if creds.mechanism != SASL_NONE:
                rc = sasl_authenticate(conn, &creds, self.client_id, self.client_id_len, self.sbuf, PM_SBUF_CAP,
                                       self.rbuf, PM_RECV_CAP, corr, deadline, &lifetime, why, sizeof(why))
                if rc != SASL_OK:
                    if why[0] == 0:
                        snprintf(why, sizeof(why), "the SASL exchange failed (%d, errno %d)", rc, conn.err)
                    self._set_error(why, conn)
                    return PM_CONNECT_FAILED
                if lifetime > 0:
                    # KIP-368: a new session before this one ends, a margin before its end.
                    reauth_at[0] = monotonic_ms() + lifetime * 85 // 100
                pthread_mutex_lock(&self.mu)
                self.n_auths += 1
                pthread_mutex_unlock(&self.mu)
            return PM_OK
        finally:
            sasl_creds_clear(&creds)

    cdef void _set_error(self, const char* why, tp_conn* conn) noexcept nogil:
        pthread_mutex_lock(&self.mu)
        snprintf(self.last_error, sizeof(self.last_error), "%s", why)
        pthread_mutex_unlock(&self.mu)
        tp_close(conn)
        conn.err = 0

    cdef void _loop(self) noexcept nogil:
        cdef tp_conn conn
        cdef int rc
        cdef int64_t cur_addr = -1, next_connect = 0, now, wake_at, epoch0, since_poll = 0, backoff, rto, connect_timeout, reply_deadline
        cdef int32_t corr = 0, gen0, rcorr = 0, throttle = 0
        cdef int16_t code = 0
        cdef int version0
        cdef Py_ssize_t n, rn = 0
        cdef bint poll_expired, session_expired, due, consumer0 = False, share0 = False, renew_now
        cdef int32_t new_epoch = 0, interval = 0
        cdef int has_assignment = 0
        cdef int64_t reauth_at = 0
        # The SASL exchange's correlation ids: apart from the heartbeats', since a LeaveGroup is
        # encoded (with its id) before the connection it goes out on is set up.
        cdef int32_t auth_corr = 0
        cdef int64_t until
        tp_init(&conn)
        pthread_mutex_lock(&self.mu)
        while not self.stop:
            if not self.active or self.halted:
                tp_close(&conn)
                pthread_mutex_unlock(&self.mu)
                self._idle_wait(-1)
                pthread_mutex_lock(&self.mu)
                continue
            if conn.fd >= 0 and cur_addr != self.addr_gen:
                tp_close(&conn)
                next_connect = 0
            now = monotonic_ms()
            pthread_mutex_lock(self.hmu)
            poll_expired = hb_poll_timeout_expired(self.hs, now)
            session_expired = hb_session_timeout_expired(self.hs, now)
            due = hb_should_heartbeat(self.hs, now)
            if self.share_mode:
                # No poll bound for a share member: its expiry neither ends nor wakes the loop.
                poll_expired = False
                wake_at = hb_next_heartbeat_ms(self.hs)
                if hb_session_expiry_ms(self.hs) < wake_at:
                    wake_at = hb_session_expiry_ms(self.hs)
            else:
                wake_at = hb_next_wakeup_ms(self.hs, now)
            since_poll = now - self.hs.last_poll_ms
            backoff = self.hs.retry_backoff_ms
            pthread_mutex_unlock(self.hmu)
            if conn.fd >= 0 and reauth_at > 0:
                if now >= reauth_at:
                    # KIP-368: the broker ends the session soon; a new connection authenticates
                    # afresh (with the newest token) between two heartbeats.
                    tp_close(&conn)
                    reauth_at = 0
                    next_connect = 0
                elif reauth_at < wake_at:
                    wake_at = reauth_at
            rto = self.request_timeout_ms
            # A connect that hangs must not outlive the session: the member would be evicted
            # while we wait (and the Python side could not take over).
            connect_timeout = self.hs.session_timeout_ms // 2 if self.hs.session_timeout_ms // 2 < rto else rto
            gen0 = self.generation
            epoch0 = self.epoch
            consumer0 = self.consumer_mode
            share0 = self.share_mode
            if poll_expired:
                # mechanisms §2 step 5: the application stalled; leave so the partitions move on.
                code = _CODE_NOT_SENT
                if self.consumer_mode or (self.leave_version >= 0 and self.instance_id_len < 0
                                          and self.member_id_len > 0):
                    if conn.fd < 0:
                        # Connected (TLS, SASL) before the request is encoded: the set-up uses
                        # the same buffers.
                        pthread_mutex_unlock(&self.mu)
                        self._connect(&conn, connect_timeout, &auth_corr, &reauth_at)
                        pthread_mutex_lock(&self.mu)
                        if self.epoch != epoch0 or self.stop:
                            continue      # reconfigured meanwhile: look again
                    corr += 1
                    if self.consumer_mode:
                        version0 = self.hb_version
                        n = pm_encode_consumer_group_heartbeat(
                            self.sbuf, PM_SBUF_CAP, version0, corr, self.client_id, self.client_id_len,
                            self.group_id, self.group_id_len, self.member_id, self.member_id_len,
                            _STATIC_LEAVE_EPOCH if self.instance_id_len >= 0 else _LEAVE_EPOCH,
                            self.instance_id, self.instance_id_len)
                    else:
                        version0 = self.leave_version
                        n = pm_encode_leave_group(self.sbuf, PM_SBUF_CAP, version0, corr, self.client_id,
                                                  self.client_id_len, self.group_id, self.group_id_len,
                                                  self.member_id, self.member_id_len, self.instance_id,
                                                  self.instance_id_len, _LEAVE_REASON, strlen(_LEAVE_REASON))
                    rcorr = -1
                    rc = PM_OVERFLOW
                    pthread_mutex_unlock(&self.mu)
                    if n > 0:
                        if conn.fd >= 0:
                            rc = self._exchange(&conn, n, &rn, now + rto, epoch0)
                            if rc == PM_OK and consumer0:
                                rc = pm_decode_consumer_group_heartbeat_response(
                                    self.rbuf, rn, version0, &rcorr, &throttle, &code, &new_epoch, &interval,
                                    &has_assignment)
                            elif rc == PM_OK:
                                rc = pm_decode_leave_group_response(self.rbuf, rn, version0, &rcorr, &code)
                    pthread_mutex_lock(&self.mu)
                    if rc != PM_OK or rcorr != corr:
                        code = _CODE_NOT_SENT
                if self.epoch == epoch0:
                    self.halted = True
                    self._post(_EV_POLL_TIMEOUT, code, gen0, now, since_poll)
                continue
            if session_expired:
                self.halted = True
                self._post(_EV_COORDINATOR_LOST, _CODE_SESSION_EXPIRED, gen0, now, 0)
                continue
            if conn.fd < 0:
                if now < next_connect:
                    # Until the next attempt, or an expiry to act on; a heartbeat that is due
                    # (wake_at in the past) cannot go out without a connection, and a negative
                    # wait would be an endless one.
                    pthread_mutex_lock(self.hmu)
                    until = hb_session_expiry_ms(self.hs)
                    if hb_poll_expiry_ms(self.hs) < until:
                        until = hb_poll_expiry_ms(self.hs)
                    pthread_mutex_unlock(self.hmu)
                    if next_connect < until:
                        until = next_connect
                    pthread_mutex_unlock(&self.mu)
                    self._idle_wait(until - now if until > now else 1)
                    pthread_mutex_lock(&self.mu)
                    continue
                cur_addr = self.addr_gen
                pthread_mutex_unlock(&self.mu)
                rc = self._connect(&conn, connect_timeout, &auth_corr, &reauth_at)
                pthread_mutex_lock(&self.mu)
                if rc != PM_OK:
                    next_connect = monotonic_ms() + (backoff if backoff > 50 else 50)
                    self._post(_EV_DISCONNECTED, PM_CONNECT_FAILED, gen0, now, conn.err)
                else:
                    self.n_connects += 1
                continue
            if not due:
                pthread_mutex_unlock(&self.mu)
                self._idle_wait(wake_at - now if wake_at > now else 1)
                pthread_mutex_lock(&self.mu)
                continue
            # mechanisms §2 step 7: send a heartbeat and wait for its answer
            corr += 1
            version0 = self.hb_version
            if share0:
                n = pm_encode_share_group_heartbeat(self.sbuf, PM_SBUF_CAP, version0, corr, self.client_id,
                                                    self.client_id_len, self.group_id, self.group_id_len,
                                                    self.member_id, self.member_id_len, gen0)
            elif consumer0:
                n = pm_encode_consumer_group_heartbeat(self.sbuf, PM_SBUF_CAP, version0, corr, self.client_id,
                                                       self.client_id_len, self.group_id, self.group_id_len,
                                                       self.member_id, self.member_id_len, gen0,
                                                       self.instance_id, self.instance_id_len)
            else:
                n = pm_encode_heartbeat(self.sbuf, PM_SBUF_CAP, version0, corr, self.client_id,
                                        self.client_id_len, self.group_id, self.group_id_len, gen0,
                                        self.member_id, self.member_id_len, self.instance_id,
                                        self.instance_id_len)
            if n < 0:   # cannot happen: configure() validated every length and version
                self.halted = True
                self._post(_EV_HEARTBEAT_ERROR, _E_UNSUPPORTED_VERSION, gen0, now, n)
                continue
            pthread_mutex_lock(self.hmu)
            hb_sent_heartbeat(self.hs, now)
            # Wait for the answer no longer than the session lasts: a silent coordinator
            # must be noticed (mechanisms §2 step 4) even when request.timeout.ms is longer.
            reply_deadline = hb_session_expiry_ms(self.hs)
            pthread_mutex_unlock(self.hmu)
            if reply_deadline > now + rto:
                reply_deadline = now + rto
            self.send_times[self.n_send_times % PM_SEND_TIMES] = now
            self.n_send_times += 1
            self.n_sent += 1
            pthread_mutex_unlock(&self.mu)
            rc = self._exchange(&conn, n, &rn, reply_deadline, epoch0)
            if rc == PM_OK:
                if share0:
                    rc = pm_decode_share_group_heartbeat_response(self.rbuf, rn, version0, &rcorr, &throttle,
                                                                  &code, &new_epoch, &interval, &has_assignment)
                elif consumer0:
                    rc = pm_decode_consumer_group_heartbeat_response(self.rbuf, rn, version0, &rcorr, &throttle,
                                                                     &code, &new_epoch, &interval, &has_assignment)
                else:
                    rc = pm_decode_heartbeat_response(self.rbuf, rn, version0, &rcorr, &throttle, &code)
                if rc == PM_OK and rcorr != corr:
                    rc = PM_CORRELATION
            pthread_mutex_lock(&self.mu)
            now = monotonic_ms()
            if rc != PM_OK:
                tp_close(&conn)
                if rc == PM_ABANDONED:
                    continue
                self.n_failed += 1
                pthread_mutex_lock(self.hmu)
                hb_fail_heartbeat(self.hs, now)
                pthread_mutex_unlock(self.hmu)
                self._post(_EV_DISCONNECTED, rc, gen0, now, conn.err)
                continue
            if self.epoch != epoch0:
                continue     # answers a configuration that is gone
            if consumer0:
                self._handle_consumer_answer(code, gen0, new_epoch, interval, has_assignment, rn, version0, now)
            else:
                self._handle_heartbeat_error(code, gen0, now)
            if code == _E_NOT_COORDINATOR or code == _E_COORDINATOR_NOT_AVAILABLE:
                tp_close(&conn)
            elif conn.fd >= 0 and reauth_at > 0:
                # KIP-368: a new session due before the next heartbeat is set up now, right after
                # this answer. Left to its time it may fall just before that heartbeat, which
                # would then wait for the TLS handshake and the SASL exchange.
                pthread_mutex_lock(self.hmu)
                renew_now = reauth_at <= hb_next_heartbeat_ms(self.hs)
                pthread_mutex_unlock(self.hmu)
                if renew_now:
                    tp_close(&conn)
                    reauth_at = 0
                    next_connect = 0
        tp_close(&conn)
        self.running = False
        pthread_cond_broadcast(&self.ev_cond)
        pthread_mutex_unlock(&self.mu)

    cdef void _handle_heartbeat_error(self, int16_t code, int32_t gen0, int64_t now) noexcept nogil:
        # caller holds mu; mechanisms §2 step 7
        pthread_mutex_lock(self.hmu)
        if code == 0 or code == _E_REBALANCE_IN_PROGRESS:
            # REBALANCE_IN_PROGRESS: the coordinator still knows us; keep the session until rejoin
            hb_received_heartbeat(self.hs, now)
        else:
            hb_fail_heartbeat(self.hs, now)
        pthread_mutex_unlock(self.hmu)
        if code == 0:
            self.n_received += 1
            return
        if code == _E_REBALANCE_IN_PROGRESS:
            self.n_received += 1
            self._post(_EV_HEARTBEAT_ERROR, code, gen0, now, 0)
            return
        self.n_failed += 1
        if code == _E_NOT_COORDINATOR or code == _E_COORDINATOR_NOT_AVAILABLE:
            self.halted = True
            self._post(_EV_COORDINATOR_LOST, code, gen0, now, 0)
        elif (code == _E_UNKNOWN_MEMBER_ID or code == _E_ILLEGAL_GENERATION or code == _E_FENCED_INSTANCE_ID
              or code == _E_GROUP_AUTHORIZATION_FAILED or code == _E_UNSUPPORTED_VERSION):
            self.halted = True    # out of the group, or it will not get better by retrying
            self._post(_EV_HEARTBEAT_ERROR, code, gen0, now, 0)
        else:
            # e.g. COORDINATOR_LOAD_IN_PROGRESS: retried after retry.backoff.ms
            self._post(_EV_HEARTBEAT_ERROR, code, gen0, now, 0)

    cdef void _handle_consumer_answer(self, int16_t code, int32_t gen0, int32_t new_epoch, int32_t interval,
                                      bint has_assignment, Py_ssize_t rn, int version, int64_t now) noexcept nogil:
        # caller holds mu; rbuf holds the answer (rn bytes). KIP-848 "Heartbeat": errors end the
        # loop's turn (Python decides), except a coordinator still loading (retried).
        pthread_mutex_lock(self.hmu)
        if code == 0:
            hb_received_heartbeat(self.hs, now)
            if interval > 0:
                # The broker sets the interval in this protocol; stay below the session bound
                # the timing struct checks against.
                if interval >= self.hs.session_timeout_ms:
                    interval = <int32_t>(self.hs.session_timeout_ms - 1 if self.hs.session_timeout_ms > 1 else 1)
                self.hs.heartbeat_interval_ms = interval
        else:
            hb_fail_heartbeat(self.hs, now)
        pthread_mutex_unlock(self.hmu)
        if code == 0:
            self.n_received += 1
            if has_assignment:
                memcpy(self.abuf, self.rbuf, rn)
                self.abuf_len = rn
                self.abuf_version = version
                self.assign_seq += 1
            if has_assignment or new_epoch != gen0:
                self.generation = new_epoch
                self._post(_EV_ASSIGNMENT, 0, new_epoch, now, self.assign_seq if has_assignment else 0)
            return
        self.n_failed += 1
        if code == _E_COORDINATOR_LOAD_IN_PROGRESS:
            self._post(_EV_HEARTBEAT_ERROR, code, gen0, now, 0)
        elif code == _E_NOT_COORDINATOR or code == _E_COORDINATOR_NOT_AVAILABLE:
            self.halted = True
            self._post(_EV_COORDINATOR_LOST, code, gen0, now, 0)
        else:
            self.halted = True
            self._post(_EV_HEARTBEAT_ERROR, code, gen0, now, 0)

# cython: language_level=3
"""A broker connection's bytes without the GIL: connect, send all, receive one frame.

The C functions (kcore/transport.pxd) serve the parts of kcore that run without the GIL:
the receive loop reads and waits through ``tp_recv`` / ``tp_wait`` and checks prefixes with
``tp_frame_size``; the pacemaker connects with ``tp_connect`` and exchanges requests with
``tp_send_all`` / ``tp_recv_frame``; kcore.frames checks its prefixes with ``tp_frame_size``.
Kafka's framing is ``int32 size`` + ``size`` bytes: a negative size or one above the
caller's bound is refused before anything is read into (or allocated for) the frame.

TLS (``tp_start_tls``): the handshake, reads and writes are OpenSSL's, on the same
non-blocking socket, waits and deadlines; a read that needs a write (or the reverse) says so
in ``tp_conn.want`` and ``tp_wait`` waits for that. The context (trust, client certificate)
is a ``kcore.tls.TlsContext`` built once, with the GIL, from the client's settings.

Waits take a wake fd (a pipe's read end, -1 for none): its becoming readable ends the wait
with TP_WOKEN, so the thread that waits can be told to stop or to look at new settings.

``Connection`` and ``frame_size`` expose the same functions to Python (with the GIL
released around I/O), for tests and tools.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc
from libc.string cimport memset, strerror, strlen

from kcore.openssl cimport (
    ERR_GET_REASON, ERR_clear_error, ERR_error_string_n, ERR_get_error, SSL, SSL_CTX,
    SSL_R_UNEXPECTED_EOF_WHILE_READING, SSL_ERROR_SYSCALL, SSL_ERROR_WANT_READ,
    SSL_ERROR_WANT_WRITE, SSL_ERROR_ZERO_RETURN, SSL_connect, SSL_free, SSL_get0_param, SSL_get_error,
    SSL_get_verify_result, SSL_new, SSL_read, SSL_set1_host, SSL_set_fd, SSL_set_tlsext_host_name, SSL_shutdown,
    SSL_write, X509_V_OK, X509_VERIFY_PARAM_set1_ip_asc, X509_verify_cert_error_string)
from kcore.tls cimport TlsContext

from kcore.posixsys cimport (
    AF_UNSPEC, AI_NUMERICSERV, EAGAIN, EBADF, EINPROGRESS, EINTR, ETIMEDOUT, EWOULDBLOCK, F_GETFL,
    F_SETFD, F_SETFL, FD_CLOEXEC, IPPROTO_TCP, MSG_NOSIGNAL, O_NONBLOCK, POLLIN, POLLNVAL,
    POLLOUT, SO_ERROR, SOCK_STREAM, SOL_SOCKET, TCP_NODELAY, addrinfo, close, connect, errno,
    fcntl, freeaddrinfo, getaddrinfo, getsockopt, monotonic_ms, pipe, poll, pollfd, recv, send,
    setsockopt, socket, socklen_t, ssize_t)

import os

from kcore.errors import FrameTooLargeError, InvalidLengthError, KafkaConnectionError
from kcore.tls import TlsHandshakeError

__all__ = ["Connection", "frame_size"]


# ------------------------------------------------------------------ C level (nogil)
cdef inline int _nonblocking(int fd) noexcept nogil:
    cdef int fl = fcntl(fd, F_GETFL, 0)
    if fl < 0:
        return -1
    fcntl(fd, F_SETFD, FD_CLOEXEC)
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK)


cdef inline int _remaining(int64_t deadline_ms) noexcept nogil:
    cdef int64_t left = deadline_ms - monotonic_ms()
    if left <= 0:
        return 0
    return <int>(left if left < INT32_MAX else INT32_MAX)


cdef extern from "<arpa/inet.h>" nogil:
    int inet_pton(int, const char*, void*)
    int AF_INET
    int AF_INET6

cdef extern from *:
    """
    #include <errno.h>
    static inline void kcore_tp_clear_errno(void) { errno = 0; }
    """
    void _clear_errno "kcore_tp_clear_errno"() noexcept nogil

cdef extern from "<errno.h>" nogil:
    int EPROTO
    int EPIPE


cdef void tp_init(tp_conn* c) noexcept nogil:
    """No connection yet."""
    c.fd = -1
    c.err = 0
    c.ssl = NULL
    c.want = 0


cdef void tp_attach(tp_conn* c, int fd) noexcept nogil:
    """Use fd (connected, non-blocking, owned by the caller) as c."""
    tp_init(c)
    c.fd = fd


cdef int tp_pipe(int* fds) noexcept nogil:
    """A wake channel: both ends non-blocking and close-on-exec. 0, or -1 (errno set)."""
    if pipe(fds) != 0:
        return -1
    _nonblocking(fds[0])
    _nonblocking(fds[1])
    return 0


cdef int tp_connect(tp_conn* c, const char* host, int port, int64_t timeout_ms) noexcept nogil:
    """Connect to host:port within timeout_ms, trying each address the resolver gives; the
    socket is non-blocking, close-on-exec, with TCP_NODELAY. TP_OK (c.fd set) or
    TP_CONNECT_FAILED (c.fd -1, c.err the last errno)."""
    cdef char portstr[16]
    cdef addrinfo hints
    cdef addrinfo* res = NULL
    cdef addrinfo* ai
    cdef int fd = -1, rc, one = 1, soerr = 0
    cdef socklen_t slen
    cdef pollfd pfd
    cdef int64_t deadline = monotonic_ms() + timeout_ms
    tp_init(c)
    snprintf(portstr, 16, "%d", port)
    memset(&hints, 0, sizeof(hints))
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = SOCK_STREAM
    hints.ai_flags = AI_NUMERICSERV
    if getaddrinfo(host, portstr, &hints, &res) != 0 or res == NULL:
        c.err = errno
        return TP_CONNECT_FAILED
    ai = res
    while ai != NULL:
        fd = socket(ai.ai_family, ai.ai_socktype, ai.ai_protocol)
        if fd >= 0:
            _nonblocking(fd)
            rc = connect(fd, ai.ai_addr, ai.ai_addrlen)
            if rc != 0 and errno == EINPROGRESS:
                pfd.fd = fd
                pfd.events = POLLOUT
                pfd.revents = 0
                if poll(&pfd, 1, _remaining(deadline)) == 1:
                    slen = sizeof(soerr)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen)
                    rc = 0 if soerr == 0 else -1
                    c.err = soerr
                else:
                    rc = -1
                    c.err = ETIMEDOUT
            elif rc != 0:
                c.err = errno
            if rc == 0:
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))
                break
            close(fd)
            fd = -1
        else:
            c.err = errno
        ai = ai.ai_next
    freeaddrinfo(res)
    if fd < 0:
        return TP_CONNECT_FAILED
    c.fd = fd
    c.err = 0
    return TP_OK


cdef void tp_close(tp_conn* c) noexcept nogil:
    if c.ssl != NULL:
        # A close_notify if the socket takes it now; never waited for (the peer may be gone),
        # and never after a fatal error (OpenSSL forbids it).
        ERR_clear_error()
        if c.want != TP_TLS_FAILED:
            SSL_shutdown(<SSL*>c.ssl)
        SSL_free(<SSL*>c.ssl)
        ERR_clear_error()
        c.ssl = NULL
    if c.fd >= 0:
        close(c.fd)
    c.fd = -1
    c.want = 0


cdef inline int _tls_again(tp_conn* c, int e) noexcept nogil:
    """After an SSL call that did not complete: TP_AGAIN (c.want set), 0 (end of stream) or
    TP_IO (c.err: errno, EPROTO for a TLS error)."""
    if e == SSL_ERROR_WANT_READ:
        c.want = TP_WANT_READ
        return TP_AGAIN
    if e == SSL_ERROR_WANT_WRITE:
        c.want = TP_WANT_WRITE
        return TP_AGAIN
    if e == SSL_ERROR_ZERO_RETURN:
        return 0
    c.want = TP_TLS_FAILED
    if e == SSL_ERROR_SYSCALL and errno != 0:
        c.err = errno
    else:
        c.err = EPROTO
    ERR_clear_error()
    return TP_IO


cdef Py_ssize_t tp_recv(tp_conn* c, void* buf, Py_ssize_t n) noexcept nogil:
    """Up to n bytes: the count (> 0), 0 at end of stream, TP_AGAIN or TP_IO."""
    cdef ssize_t k
    cdef int r
    if c.ssl != NULL:
        ERR_clear_error()
        _clear_errno()
        r = SSL_read(<SSL*>c.ssl, buf, <int>(n if n < INT32_MAX else INT32_MAX))
        if r > 0:
            return r
        return _tls_again(c, SSL_get_error(<SSL*>c.ssl, r))
    while True:
        k = recv(c.fd, buf, <size_t>n, 0)
        if k >= 0:
            return k
        if errno == EINTR:
            continue
        if errno == EAGAIN or errno == EWOULDBLOCK:
            return TP_AGAIN
        c.err = errno
        return TP_IO


cdef Py_ssize_t tp_send(tp_conn* c, const void* buf, Py_ssize_t n) noexcept nogil:
    """Up to n bytes written (never SIGPIPE): the count (> 0), TP_AGAIN or TP_IO. Over TLS
    a write that returned TP_AGAIN must be repeated with the same bytes."""
    cdef ssize_t k
    cdef int r
    if c.ssl != NULL:
        ERR_clear_error()
        _clear_errno()
        r = SSL_write(<SSL*>c.ssl, buf, <int>(n if n < INT32_MAX else INT32_MAX))
        if r > 0:
            return r
        r = _tls_again(c, SSL_get_error(<SSL*>c.ssl, r))
        if r == 0:      # the peer closed the session: nothing more can be written
            c.err = EPIPE
            return TP_IO
        return r
    while True:
        k = send(c.fd, buf, <size_t>n, MSG_NOSIGNAL)
        if k > 0:
            return k
        if k < 0 and errno == EINTR:
            continue
        if k < 0 and (errno == EAGAIN or errno == EWOULDBLOCK):
            return TP_AGAIN
        c.err = errno if k < 0 else 0
        return TP_IO


cdef int tp_wait(tp_conn* c, bint writing, int wake_fd, int timeout_ms) noexcept nogil:
    """Wait until c can be read (or written), wake_fd is readable, or timeout_ms passes
    (-1: no limit). TP_WOKEN (wake_fd first), TP_OK (try the read or write: it may still
    find nothing after an interrupted wait, and reports a socket error itself), TP_TIMEOUT
    or TP_IO."""
    cdef pollfd pfds[2]
    cdef int rc
    cdef int nfds = 2 if wake_fd >= 0 else 1
    if c.want == TP_WANT_READ or c.want == TP_WANT_WRITE:   # TLS: what the session needs
        writing = c.want == TP_WANT_WRITE
        c.want = 0
    pfds[0].fd = c.fd
    pfds[0].events = POLLOUT if writing else POLLIN
    pfds[0].revents = 0
    pfds[1].fd = wake_fd
    pfds[1].events = POLLIN
    pfds[1].revents = 0
    rc = poll(pfds, nfds, timeout_ms)
    if rc < 0:
        if errno == EINTR:
            return TP_OK
        c.err = errno
        return TP_IO
    if nfds == 2 and pfds[1].revents:
        return TP_WOKEN
    if rc == 0:
        return TP_TIMEOUT
    if pfds[0].revents & POLLNVAL:
        c.err = EBADF      # the fd was closed under the connection
        return TP_IO
    return TP_OK


cdef int tp_send_all(tp_conn* c, const uint8_t* p, Py_ssize_t n, int64_t deadline_ms) noexcept nogil:
    """Write all n bytes by deadline_ms: TP_OK, TP_TIMEOUT or TP_IO."""
    cdef Py_ssize_t k
    cdef int rc, left
    while n > 0:
        k = tp_send(c, p, n)
        if k > 0:
            p += k
            n -= k
            continue
        if k != TP_AGAIN:
            return TP_IO
        left = _remaining(deadline_ms)
        if left == 0:
            return TP_TIMEOUT
        rc = tp_wait(c, True, -1, left)
        if rc == TP_IO:
            return TP_IO
    return TP_OK


cdef void _tls_why(tp_conn* c, int e, char* why, size_t cap) noexcept nogil:
    cdef long verify = SSL_get_verify_result(<SSL*>c.ssl)
    cdef unsigned long code
    if cap == 0:
        return
    why[0] = 0
    if verify != X509_V_OK:
        snprintf(why, cap, "certificate verify failed: %s", X509_verify_cert_error_string(verify))
        return
    code = ERR_get_error()
    if code != 0 and ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING:
        snprintf(why, cap, "the peer closed the connection during the TLS handshake (is the listener TLS?)")
    elif code != 0:
        ERR_error_string_n(code, why, cap)
    elif e == SSL_ERROR_SYSCALL or e == SSL_ERROR_ZERO_RETURN:
        if errno != 0:
            snprintf(why, cap, "the peer closed the connection during the TLS handshake (%s; is the listener TLS?)",
                     strerror(errno))
        else:
            snprintf(why, cap, "the peer closed the connection during the TLS handshake (is the listener TLS?)")
    else:
        snprintf(why, cap, "TLS handshake failed (SSL error %d)", e)


cdef int tp_start_tls(tp_conn* c, void* ssl_ctx, const char* host, bint check_host, int64_t deadline_ms,
                      char* why, size_t why_cap) noexcept nogil:
    """Run the TLS handshake on c's connected socket by deadline_ms, as a client of ssl_ctx
    (an SSL_CTX*: trust, client certificate, server verification). host is sent as SNI unless
    it is an address, and the certificate must name it when check_host. TP_OK (c reads and
    writes TLS from now on); TP_TIMEOUT, TP_IO or TP_TLS with the reason in why: the caller
    closes c."""
    cdef SSL* s
    cdef int r, e, left, rc
    cdef unsigned char addr[16]
    cdef bint is_ip = inet_pton(AF_INET, host, addr) == 1 or inet_pton(AF_INET6, host, addr) == 1
    if why_cap:
        why[0] = 0
    ERR_clear_error()
    s = SSL_new(<SSL_CTX*>ssl_ctx)
    if s == NULL:
        snprintf(why, why_cap, "cannot create a TLS session")
        return TP_TLS
    c.ssl = s
    if SSL_set_fd(s, c.fd) != 1:
        snprintf(why, why_cap, "cannot attach the TLS session to the socket")
        return TP_TLS
    if not is_ip and strlen(host) > 0:
        SSL_set_tlsext_host_name(s, host)
    if check_host:
        if is_ip:
            r = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host)
        else:
            r = SSL_set1_host(s, host)
        if r != 1:
            snprintf(why, why_cap, "cannot check the certificate against host %s", host)
            return TP_TLS
    while True:
        ERR_clear_error()
        _clear_errno()
        r = SSL_connect(s)
        if r == 1:
            c.want = 0
            return TP_OK
        e = SSL_get_error(s, r)
        if e != SSL_ERROR_WANT_READ and e != SSL_ERROR_WANT_WRITE:
            _tls_why(c, e, why, why_cap)
            c.want = TP_TLS_FAILED
            return TP_TLS
        left = _remaining(deadline_ms)
        if left == 0:
            snprintf(why, why_cap, "the TLS handshake did not complete in time")
            return TP_TIMEOUT
        c.want = TP_WANT_WRITE if e == SSL_ERROR_WANT_WRITE else TP_WANT_READ
        rc = tp_wait(c, False, -1, left)
        if rc == TP_IO:
            snprintf(why, why_cap, "waiting for the TLS handshake failed (errno %d)", c.err)
            return TP_IO


cdef void tp_frame_start(tp_frame* f) noexcept nogil:
    f.got = 0
    f.size = -1
    f.ended = TP_OK
    f.refused = 0


cdef inline int _end(tp_frame* f, int rc) noexcept nogil:
    f.ended = rc
    return rc


cdef int tp_recv_frame(tp_conn* c, tp_frame* f, uint8_t* buf, Py_ssize_t max_frame_bytes,
                       int64_t deadline_ms, int wake_fd) noexcept nogil:
    """Receive one frame into buf (room for max_frame_bytes), its length in f.size, without
    its prefix, by deadline_ms. TP_OK; TP_WOKEN or TP_TIMEOUT (call again with the same f to
    go on); TP_CLOSED, TP_IO, TP_NEGATIVE or TP_TOO_BIG (f.refused: the length): the stream
    cannot go on, and every later call says so again. Reads never go past the frame: what
    follows stays in the socket."""
    cdef Py_ssize_t k
    cdef int32_t length
    cdef int rc, left
    if f.ended != TP_OK:
        return f.ended
    if f.size > max_frame_bytes:        # accepted under a larger bound than buf has room for now
        f.refused = <int32_t>f.size
        return _end(f, TP_TOO_BIG)
    while True:
        if f.size < 0:
            k = tp_recv(c, f.head + f.got, 4 - f.got)
        elif f.got < f.size:
            k = tp_recv(c, buf + f.got, f.size - f.got)
        else:
            return TP_OK
        if k > 0:
            f.got += k
            if f.size < 0 and f.got == 4:
                rc = tp_frame_size(f.head, max_frame_bytes, &length)
                if rc != TP_OK:
                    f.refused = length
                    return _end(f, rc)
                f.size = length
                f.got = 0
            continue
        if k == 0:
            return _end(f, TP_CLOSED)
        if k != TP_AGAIN:
            return _end(f, TP_IO)
        left = _remaining(deadline_ms)
        if left == 0:
            return TP_TIMEOUT
        rc = tp_wait(c, False, wake_fd, left)
        if rc == TP_WOKEN:
            return rc
        if rc == TP_IO:
            return _end(f, rc)


cdef object frame_size_error(int rc, int64_t length, Py_ssize_t max_frame_bytes):
    if rc == TP_NEGATIVE:
        return InvalidLengthError(f"negative frame size {length}")
    return FrameTooLargeError(f"frame of {length} bytes exceeds the limit of {max_frame_bytes} bytes")


# ------------------------------------------------------------------ Python level
cdef int _check_bound(Py_ssize_t max_frame_bytes) except -1:
    if max_frame_bytes < 0 or max_frame_bytes > 0x7fffffff:
        raise ValueError("max_frame_bytes must be in [0, 2**31-1]")
    return 0


def frame_size(prefix, Py_ssize_t max_frame_bytes):
    """The length in a frame's 4-byte size prefix; InvalidLengthError if negative,
    FrameTooLargeError above max_frame_bytes, ValueError unless prefix has 4 bytes."""
    cdef Py_buffer view
    cdef int32_t length
    cdef int rc
    _check_bound(max_frame_bytes)
    PyObject_GetBuffer(prefix, &view, PyBUF_SIMPLE)
    try:
        if view.len != 4:
            raise ValueError(f"a size prefix has 4 bytes, got {view.len}")
        rc = tp_frame_size(<const uint8_t*>view.buf, max_frame_bytes, &length)
    finally:
        PyBuffer_Release(&view)
    if rc != TP_OK:
        raise frame_size_error(rc, length, max_frame_bytes)
    return length


@cython.final
cdef class Connection:
    """One connection through the C functions above: ``Connection.open(host, port,
    timeout_ms)`` connects (and owns the socket), ``Connection(fd)`` uses a connected socket
    the caller owns (it is made non-blocking). Not for several threads at once."""

    cdef tp_conn _c
    cdef bint _owned
    cdef tp_frame _frame          # the frame being received (resumed by the next call)
    cdef uint8_t* _buf
    cdef Py_ssize_t _buf_cap

    def __cinit__(self, int fd=-1):
        tp_init(&self._c)
        tp_frame_start(&self._frame)
        if fd >= 0:
            _nonblocking(fd)
            tp_attach(&self._c, fd)

    def __dealloc__(self):
        if self._owned:
            tp_close(&self._c)
        elif self._c.ssl != NULL:
            SSL_free(<SSL*>self._c.ssl)
        free(self._buf)

    @staticmethod
    def open(host, int port, int64_t timeout_ms):
        """Connect (OSError with the errno of the last address tried when none took it)."""
        cdef bytes h = host.encode() if isinstance(host, str) else bytes(host)
        cdef const char* hp
        cdef int rc
        cdef Connection conn = Connection()
        if not 0 < port < 65536:
            raise ValueError(f"port must be 1..65535, got {port}")
        if b"\0" in h:
            raise ValueError("host must not contain NUL")
        hp = PyBytes_AS_STRING(h)
        with nogil:
            rc = tp_connect(&conn._c, hp, port, timeout_ms)
        if rc != TP_OK:
            err = conn._c.err
            raise OSError(err, f"cannot connect to {host}:{port}: {os.strerror(err) if err else 'no address'}")
        conn._owned = True
        return conn

    @property
    def fd(self):
        return self._c.fd

    @property
    def tls(self):
        """TLS is established on this connection."""
        return self._c.ssl != NULL

    def start_tls(self, TlsContext context not None, server_hostname, int64_t timeout_ms):
        """Run the TLS handshake (TlsHandshakeError saying why, TimeoutError); reads and
        writes are TLS afterwards. ``server_hostname`` is the name (or address) the server's
        certificate must carry unless the context skips the check."""
        cdef bytes h = server_hostname.encode() if isinstance(server_hostname, str) else bytes(server_hostname)
        cdef const char* hp
        cdef char why[256]
        cdef int rc
        cdef int64_t deadline = monotonic_ms() + timeout_ms
        cdef void* ctx = context.ctx
        cdef bint check = context.check_hostname
        self._check_open()
        if self._c.ssl != NULL:
            raise ValueError("TLS is already established on this connection")
        if b"\0" in h:
            raise ValueError("server_hostname must not contain NUL")
        hp = PyBytes_AS_STRING(h)
        with nogil:
            rc = tp_start_tls(&self._c, ctx, hp, check, deadline, why, sizeof(why))
        if rc == TP_OK:
            return
        if self._c.ssl != NULL:
            SSL_free(<SSL*>self._c.ssl)
            self._c.ssl = NULL
        message = why.decode("utf-8", "replace")
        if rc == TP_TIMEOUT:
            raise TimeoutError(f"{message} ({timeout_ms} ms)")
        raise TlsHandshakeError(f"TLS handshake with {server_hostname} failed: {message}")

    def send_all(self, data, int64_t timeout_ms):
        """Write all of data within timeout_ms (TimeoutError, OSError)."""
        cdef Py_buffer view
        cdef int rc
        cdef int64_t deadline = monotonic_ms() + timeout_ms
        self._check_open()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            with nogil:
                rc = tp_send_all(&self._c, <const uint8_t*>view.buf, view.len, deadline)
        finally:
            PyBuffer_Release(&view)
        if rc == TP_TIMEOUT:
            raise TimeoutError(f"send did not complete within {timeout_ms} ms")
        if rc != TP_OK:
            raise OSError(self._c.err, os.strerror(self._c.err))

    def recv_frame(self, Py_ssize_t max_frame_bytes, int64_t timeout_ms, int wake_fd=-1):
        """The next frame (bytes, without its prefix), or None if wake_fd became readable
        first. TimeoutError when timeout_ms passes (the next call goes on with the same
        frame); KafkaConnectionError at end of stream, InvalidLengthError /
        FrameTooLargeError for a refused prefix, OSError for a socket error. Holds a
        buffer of max_frame_bytes."""
        cdef int rc
        cdef int64_t deadline = monotonic_ms() + timeout_ms
        cdef tp_frame* f = &self._frame
        self._check_open()
        _check_bound(max_frame_bytes)
        if self._buf_cap < max_frame_bytes or self._buf == NULL:
            if f.size > 0 and f.got > 0:
                raise ValueError("max_frame_bytes cannot grow while a frame is partly received")
            free(self._buf)
            self._buf = <uint8_t*>malloc(max_frame_bytes if max_frame_bytes else 1)
            self._buf_cap = max_frame_bytes if self._buf != NULL else 0
            if self._buf == NULL:
                raise MemoryError()
        with nogil:
            rc = tp_recv_frame(&self._c, f, self._buf, max_frame_bytes, deadline, wake_fd)
        if rc == TP_OK:
            frame = PyBytes_FromStringAndSize(<char*>self._buf, f.size)
            tp_frame_start(f)
            return frame
        if rc == TP_WOKEN:
            return None
        if rc == TP_TIMEOUT:
            raise TimeoutError(f"no complete frame within {timeout_ms} ms")
        if rc == TP_NEGATIVE or rc == TP_TOO_BIG:
            raise frame_size_error(rc, f.refused, max_frame_bytes)
        if rc == TP_CLOSED:
            if f.size >= 0:
                raise KafkaConnectionError(
                    f"connection closed by the peer after {f.got} of the {f.size} bytes of a frame")
            if f.got > 0:
                raise KafkaConnectionError("connection closed by the peer after part of a frame size prefix")
            raise KafkaConnectionError("connection closed by the peer")
        raise OSError(self._c.err, os.strerror(self._c.err))

    def close(self):
        """Close the socket if this connection opened it; forget it either way."""
        if self._owned:
            tp_close(&self._c)
        elif self._c.ssl != NULL:
            SSL_free(<SSL*>self._c.ssl)
        tp_init(&self._c)
        self._owned = False

    cdef int _check_open(self) except -1:
        if self._c.fd < 0:
            raise ValueError("the connection is closed")
        return 0

# cython: language_level=3
"""C interface of kcore.transport: a broker connection's bytes, without the GIL.

Every byte the GIL-free parts of kcore exchange with a broker (the receive loop, the
pacemaker) goes through these functions and every size prefix is checked by
``tp_frame_size``. ``tp_conn`` is the connection whatever it is carried over (plain TCP, or
TLS once ``tp_start_tls`` has completed the handshake: OpenSSL's libssl, called without the
GIL), ``tp_recv`` / ``tp_send`` / ``tp_wait`` are its only reads, writes and waits.

Results are 0 (TP_OK) or one of the negative TP_* codes; reads and writes return a byte count
(> 0), 0 at end of stream (reads), or a negative code.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t

from kcore.wire cimport load_be32

cdef enum:
    TP_OK = 0
    TP_IO = -10                # the OS refused a call: tp_conn.err holds its errno
    TP_TIMEOUT = -11           # the deadline passed
    TP_TOO_BIG = -12           # a size prefix above the bound
    TP_CONNECT_FAILED = -14    # no address of the host took the connection (err: the last errno)
    TP_CLOSED = -20            # end of stream
    TP_NEGATIVE = -21          # a negative size prefix
    TP_AGAIN = -22             # nothing can be read or written now
    TP_WOKEN = -23             # the wake fd became readable
    TP_TLS = -15               # the TLS handshake failed (tp_start_tls says why)
    TP_WANT_READ = 1           # tp_conn.want: TLS must read before the call can go on
    TP_WANT_WRITE = 2          # ... must write
    TP_TLS_FAILED = 3          # tp_conn.want: the TLS session had a fatal error (no close_notify then)


ctypedef struct tp_conn:
    int fd                     # -1: none
    int err                    # errno behind the last TP_IO / TP_CONNECT_FAILED (0: none)
    void* ssl                  # the TLS session (an OpenSSL SSL*), NULL on plain TCP
    int want                   # TLS: the direction the last TP_AGAIN waits for (0: the caller's),
                               # or TP_TLS_FAILED


# A frame being received by tp_recv_frame: resumable after TP_WOKEN and TP_TIMEOUT, so a
# caller woken for another reason goes on where it stopped. Once the stream cannot go on
# (end of stream, an I/O error, a refused prefix) every later call returns the same result.
ctypedef struct tp_frame:
    uint8_t head[4]
    Py_ssize_t got             # bytes of the prefix (size < 0) or of the body received
    Py_ssize_t size            # the frame's length once its prefix is complete and accepted, else -1
    int ended                  # the result that ended the stream, 0 while it goes on
    int32_t refused            # the length in a refused prefix


cdef inline int tp_frame_size(const uint8_t* prefix, Py_ssize_t max_frame_bytes,
                              int32_t* length) noexcept nogil:
    """The length in a 4-byte size prefix (stored in length even when refused): TP_OK,
    TP_NEGATIVE, or TP_TOO_BIG above max_frame_bytes. Nothing may be allocated for a frame
    before this said TP_OK."""
    cdef int32_t n = <int32_t>load_be32(prefix)
    length[0] = n
    if n < 0:
        return TP_NEGATIVE
    if n > max_frame_bytes:
        return TP_TOO_BIG
    return TP_OK


cdef void tp_init(tp_conn* c) noexcept nogil
cdef void tp_attach(tp_conn* c, int fd) noexcept nogil
cdef int tp_start_tls(tp_conn* c, void* ssl_ctx, const char* host, bint check_host, int64_t deadline_ms,
                      char* why, size_t why_cap) noexcept nogil
cdef int tp_connect(tp_conn* c, const char* host, int port, int64_t timeout_ms) noexcept nogil
cdef void tp_close(tp_conn* c) noexcept nogil
cdef int tp_pipe(int* fds) noexcept nogil
cdef Py_ssize_t tp_recv(tp_conn* c, void* buf, Py_ssize_t n) noexcept nogil
cdef Py_ssize_t tp_send(tp_conn* c, const void* buf, Py_ssize_t n) noexcept nogil
cdef int tp_wait(tp_conn* c, bint writing, int wake_fd, int timeout_ms) noexcept nogil
cdef int tp_send_all(tp_conn* c, const uint8_t* p, Py_ssize_t n, int64_t deadline_ms) noexcept nogil
cdef void tp_frame_start(tp_frame* f) noexcept nogil
cdef int tp_recv_frame(tp_conn* c, tp_frame* f, uint8_t* buf, Py_ssize_t max_frame_bytes,
                       int64_t deadline_ms, int wake_fd) noexcept nogil

# The exception for a refused size prefix (TP_NEGATIVE / TP_TOO_BIG), worded the same
# wherever a prefix is checked.
cdef object frame_size_error(int rc, int64_t length, Py_ssize_t max_frame_bytes)

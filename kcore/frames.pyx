# cython: language_level=3
"""Kafka request/response headers and the incremental length-prefixed frame splitter.

Every Kafka message on a socket is ``int32 size`` + ``size`` bytes. FrameSplitter is fed the
chunks a socket read returns and hands back complete frames (without the prefix). A frame
that arrives whole inside one chunk is returned without copying when it is large (a
memoryview slice of an immutable chunk); a frame split over several reads is copied once
into a bytes object allocated at its final size, so the total work stays linear in the
bytes received however the stream is cut. A negative or over-limit prefix raises before
anything is allocated for it.

FrameReceiver reads a socket itself, so that no read allocates: small frames come out of a
reused receive buffer (one copy each), and a large frame is received straight into the
object it is handed out as, once its size prefix is known (no copy beyond the part that
arrived in the receive buffer with the prefix). That object is a Frame: a read-only
bytes-like buffer over a block of kcore.pool, so the memory of a response that was released
is received into again instead of fresh pages (a page fault per 4 KiB on first touch made
every recv of a large Fetch response cost several times its copy).
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.string cimport memcpy, memmove

from kcore.pool cimport CArray, pool_give, pool_size_class, pool_take
from kcore.posixsys cimport POLLIN, poll, pollfd
from kcore.transport cimport TP_OK, frame_size_error, tp_frame_size
from kcore.wire cimport load_be32

from kcore.errors import KafkaConnectionError

cdef bint _readable_within(int fd, int wait_ms) noexcept:
    """Whether fd becomes readable (or errored: the next read says how) within wait_ms,
    waiting without the GIL."""
    cdef pollfd pfd
    cdef int rc
    pfd.fd = fd
    pfd.events = POLLIN
    pfd.revents = 0
    with nogil:
        rc = poll(&pfd, 1, wait_ms)
    return rc > 0

# Below this size a complete frame is copied into its own bytes object: cheaper than a
# memoryview slice, and it does not pin the whole read chunk in memory.
cdef Py_ssize_t ZERO_COPY_MIN = 4096
# Copies at least this large release the GIL (other threads run meanwhile).
cdef Py_ssize_t NOGIL_COPY_MIN = 65536


# ------------------------------------------------------------------ headers
cdef int write_request_header(Writer w, int16_t api_key, int16_t api_version,
                              int32_t correlation_id, object client_id,
                              int header_version) except -1:
    w.write_int16(api_key)
    w.write_int16(api_version)
    w.write_int32(correlation_id)
    if header_version >= 1:
        w.write_nullable_string(client_id)
    if header_version >= 2:
        w.write_uvarint(0)          # no header tagged fields
    return 0


cdef tuple read_request_header(Reader r, int header_version):
    cdef int16_t api_key = r.read_int16()
    cdef int16_t api_version = r.read_int16()
    cdef int32_t correlation_id = r.read_int32()
    client_id = r.read_nullable_string() if header_version >= 1 else None
    if header_version >= 2:
        r.skip_tagged_fields()
    return api_key, api_version, correlation_id, client_id


cdef int write_response_header(Writer w, int32_t correlation_id, int header_version) except -1:
    w.write_int32(correlation_id)
    if header_version >= 1:
        w.write_uvarint(0)
    return 0


cdef int32_t read_response_header(Reader r, int header_version) except? -1:
    cdef int32_t corr = r.read_int32()
    if header_version >= 1:
        r.skip_tagged_fields()
    return corr


def encode_request_header(int16_t api_key, int16_t api_version, int32_t correlation_id,
                          client_id, int header_version=1):
    """The request header bytes (no size prefix)."""
    cdef Writer w = Writer(64)
    write_request_header(w, api_key, api_version, correlation_id, client_id, header_version)
    return w.getvalue_c()


def decode_request_header(frame, int header_version=1):
    """(api_key, api_version, correlation_id, client_id, body_offset) of a request frame
    given without its size prefix."""
    cdef Reader r = Reader(frame)
    return read_request_header(r, header_version) + (r.pos,)


def peek_request_api(frame):
    """(api_key, api_version) of a request frame, to choose its header version."""
    cdef Reader r = Reader(frame)
    cdef int16_t api_key = r.read_int16()
    cdef int16_t api_version = r.read_int16()
    return api_key, api_version


def encode_response_header(int32_t correlation_id, int header_version=0):
    cdef Writer w = Writer(16)
    write_response_header(w, correlation_id, header_version)
    return w.getvalue_c()


def decode_response_header(frame, int header_version=0):
    """(correlation_id, body_offset) of a response frame given without its size prefix."""
    cdef Reader r = Reader(frame)
    cdef int32_t corr = read_response_header(r, header_version)
    return corr, r.pos


def response_correlation_id(frame):
    """The correlation id: the first 4 bytes of a frame given without its size prefix."""
    cdef Reader r = Reader(frame)
    return r.read_int32()


# ------------------------------------------------------------------ pooled frames
@cython.final
cdef class Frame(CArray):
    """A large received frame: read-only bytes-like (buffer protocol, format "B"), over a
    kcore.pool block that goes back to the pool when the last reference (memoryview slices
    of it included) is gone. Compares equal to bytes-like objects of the same content;
    ``bytes(frame)`` copies it."""

    def __bytes__(self):
        return PyBytes_FromStringAndSize(<const char*>self.ptr, self.nbytes)

    def __eq__(self, other):
        try:
            return memoryview(self) == memoryview(other).cast("B")
        except TypeError:
            return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __repr__(self):
        return f"<kcore.frames.Frame of {self.nbytes} bytes>"


cdef Frame new_frame(Py_ssize_t length):
    """An uninitialised Frame of ``length`` bytes from the pool (the caller fills all of it
    before anyone else sees it)."""
    cdef size_t got
    # In the pool's size classes: responses to the same fetches differ by a few bytes, and
    # a frame a little larger than every pooled block would miss them all and take fresh
    # pages; rounded up, it fits the block its predecessor left.
    cdef void* ptr = pool_take(pool_size_class(<size_t>length), &got)
    if ptr == NULL:
        raise MemoryError()
    return frame_over(ptr, length, got)


cdef Frame frame_over(void* ptr, Py_ssize_t length, size_t got):
    cdef Frame f
    try:
        f = Frame.__new__(Frame)
    except BaseException:
        pool_give(ptr, got)
        raise
    f.ptr = ptr
    f.capb = got
    f.nbytes = length
    f.itemsize = 1
    f.fmt = b"B"
    f.shape[0] = length
    f.strides[0] = 1
    return f


# ------------------------------------------------------------------ splitter
cdef inline void _copy(uint8_t* dst, const uint8_t* src, Py_ssize_t n) noexcept:
    if n >= NOGIL_COPY_MIN:
        with nogil:
            memcpy(dst, src, n)
    else:
        memcpy(dst, src, n)


cdef class FrameSplitter:
    """Splits a byte stream into Kafka frames.

    ``feed(chunk)`` returns the frames completed by ``chunk`` (each without its 4-byte size
    prefix) as bytes, or as memoryview slices of ``chunk`` when ``chunk`` is immutable and
    the frame is large. A size prefix that is negative raises InvalidLengthError, one above
    ``max_frame_bytes`` FrameTooLargeError, before any allocation; the splitter then stays
    failed (every later feed raises the same error) since the stream can no longer be
    framed.
    """

    def __cinit__(self, Py_ssize_t max_frame_bytes=104857600):
        if max_frame_bytes < 0 or max_frame_bytes > 0x7fffffff:
            raise ValueError("max_frame_bytes must be in [0, 2**31-1]")
        self.max_frame_bytes = max_frame_bytes
        self._hdr_len = 0
        self._partial = None
        self._partial_len = 0
        self._partial_fill = 0
        self._error = None

    @property
    def buffered_bytes(self):
        """Bytes received for the frame not yet complete (prefix included)."""
        if self._partial is not None:
            return 4 + self._partial_fill
        return self._hdr_len

    @property
    def pending_frame_size(self):
        """Size of the incomplete frame being assembled, or None."""
        return self._partial_len if self._partial is not None else None

    def reset(self):
        """Drop any partial frame (e.g. after reconnecting)."""
        self._hdr_len = 0
        self._partial = None
        self._partial_len = 0
        self._partial_fill = 0
        self._error = None

    def feed(self, chunk):
        return self.feed_c(chunk)

    cdef list feed_c(self, object chunk):
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos = 0, take
        cdef int32_t length
        cdef int rc
        cdef bint zero_copy
        cdef list frames = []
        cdef object mv = None
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            zero_copy = view.readonly
            while pos < n:
                if self._partial is not None:
                    take = self._partial_len - self._partial_fill
                    if take > n - pos:
                        take = n - pos
                    _copy(<uint8_t*>PyBytes_AS_STRING(self._partial) + self._partial_fill,
                          p + pos, take)
                    self._partial_fill += take
                    pos += take
                    if self._partial_fill == self._partial_len:
                        frames.append(self._partial)
                        self._partial = None
                    continue
                if self._hdr_len > 0 or n - pos < 4:
                    take = 4 - self._hdr_len
                    if take > n - pos:
                        take = n - pos
                    memcpy(self._hdr + self._hdr_len, p + pos, take)
                    self._hdr_len += take
                    pos += take
                    if self._hdr_len < 4:
                        break
                    self._hdr_len = 0
                    rc = tp_frame_size(self._hdr, self.max_frame_bytes, &length)
                else:
                    rc = tp_frame_size(p + pos, self.max_frame_bytes, &length)
                    pos += 4
                if rc != TP_OK:
                    self._error = frame_size_error(rc, length, self.max_frame_bytes)
                    raise self._error
                if n - pos >= length:
                    if zero_copy and length >= ZERO_COPY_MIN:
                        if mv is None:
                            mv = memoryview(chunk)
                            if mv.ndim != 1 or mv.format != "B":
                                mv = mv.cast("B")
                        frames.append(mv[pos:pos + length])
                    else:
                        frames.append(PyBytes_FromStringAndSize(<const char*>(p + pos), length))
                    pos += length
                else:
                    # allocated only now that the size is known to be within the limit
                    self._partial = PyBytes_FromStringAndSize(NULL, length)
                    self._partial_len = length
                    self._partial_fill = 0
            return frames
        finally:
            PyBuffer_Release(&view)


# ------------------------------------------------------------------ receiver
cdef int check_receive_sizes(Py_ssize_t max_frame_bytes, Py_ssize_t buffer_size) except -1:
    if max_frame_bytes < 0 or max_frame_bytes > 0x7fffffff:
        raise ValueError("max_frame_bytes must be in [0, 2**31-1]")
    if buffer_size < 64 or buffer_size > 0x7fffffff:
        raise ValueError("buffer_size must be in [64, 2**31-1]")
    return 0


cdef class FrameReceiver:
    """Reads Kafka frames from a socket with at most one copy and no allocation per read.

    ``receive(sock)`` calls ``sock.recv_into`` and returns the frames it completed (each
    without its 4-byte size prefix). Reads go into a receive buffer of ``buffer_size`` bytes
    that is reused for the receiver's whole life; a frame shorter than ``buffer_size // 2``
    is copied out of it into its own ``bytes`` object. A longer frame gets its final object,
    a Frame (read-only, bytes-like, over a recycled kcore.pool block), as soon as its prefix
    is read: the part already in the buffer is copied into it and the rest is received
    straight into it (a writable view of its memory exists only for the duration of each
    ``recv_into`` call and is released right after, so nothing can write into a frame once
    it is handed out).

    A negative size prefix raises InvalidLengthError, one above ``max_frame_bytes``
    FrameTooLargeError, before anything is allocated for the frame; the receiver then stays
    failed (every later call raises the same error) since the stream can no longer be framed.
    End of stream raises KafkaConnectionError (saying how much of a frame was received if it
    came in the middle of one). ``BlockingIOError`` from a non-blocking socket is not an
    error: ``receive`` returns what it has, and the next call resumes where this one stopped.
    Other socket errors (timeouts included) propagate and leave the receiver resumable.

    One call reads until the socket returns fewer bytes than asked for (it had nothing more
    at that moment) or would block. Without ``drain`` it also returns as soon as a read has
    completed a frame, so on a blocking socket it only blocks while it has no frame to give;
    with ``drain`` (for non-blocking sockets) it keeps reading while reads come back full.
    """

    def __cinit__(self, Py_ssize_t max_frame_bytes=104857600, Py_ssize_t buffer_size=65536):
        check_receive_sizes(max_frame_bytes, buffer_size)
        self.max_frame_bytes = max_frame_bytes
        self.buffer_size = buffer_size
        # A frame below this fits in the buffer with its prefix (so compaction can always make
        # room for it); at or above it, it is received directly into its own object.
        self._direct_min = buffer_size // 2
        self._buf = <char*>PyMem_Malloc(buffer_size)
        if self._buf == NULL:
            raise MemoryError()
        self._start = 0
        self._end = 0
        self._frame = None
        self._frame_buf = NULL
        self._frame_len = 0
        self._frame_fill = 0
        self._error = None
        self._deferred = None
        self.received_bytes = 0

    def __dealloc__(self):
        PyMem_Free(self._buf)
        self._buf = NULL

    @property
    def buffered_bytes(self):
        """Bytes received for frames not yet complete (prefixes included)."""
        if self._frame is not None:
            return 4 + self._frame_fill
        return self._end - self._start

    @property
    def pending_frame_size(self):
        """Size of the incomplete frame being received, if its prefix has arrived, or None."""
        if self._frame is not None:
            return self._frame_len
        if self._end - self._start >= 4:
            return <int32_t>load_be32(<const uint8_t*>self._buf + self._start)
        return None

    def reset(self):
        """Drop any partial frame and a failed state (e.g. after reconnecting)."""
        self._start = 0
        self._end = 0
        self._frame = None
        self._frame_buf = NULL
        self._frame_len = 0
        self._frame_fill = 0
        self._error = None
        self._deferred = None

    def receive(self, sock, bint drain=False, int wait_ms=0):
        if wait_ms < 0:
            raise ValueError(f"wait_ms must be >= 0, got {wait_ms}")
        return self.receive_c(sock, drain, wait_ms)

    cdef int _fail(self, int rc, int32_t length) except -1:
        self._error = frame_size_error(rc, length, self.max_frame_bytes)
        raise self._error

    cdef int _split(self, list frames) except -1:
        """Move every complete frame out of the buffer; switch to direct reception when the
        incomplete frame left is a large one."""
        cdef const uint8_t* p = <const uint8_t*>self._buf
        cdef Py_ssize_t start = self._start, end = self._end, avail
        cdef int32_t length
        cdef int rc
        try:
            while end - start >= 4:
                rc = tp_frame_size(p + start, self.max_frame_bytes, &length)
                if rc != TP_OK:
                    self._fail(rc, length)
                avail = end - start - 4
                if avail >= length:
                    frames.append(PyBytes_FromStringAndSize(<const char*>p + start + 4, length))
                    start += 4 + length
                elif length >= self._direct_min:
                    # allocated only now that the size is known to be within the limit
                    self._frame = new_frame(length)
                    self._frame_buf = <char*>(<Frame>self._frame).ptr
                    _copy(<uint8_t*>self._frame_buf, p + start + 4, avail)
                    self._frame_len = length
                    self._frame_fill = avail
                    start = end
                    break
                else:
                    break
        finally:
            if start == end:
                start = end = 0
            self._start = start
            self._end = end
        return 0

    cdef Py_ssize_t _recv(self, object sock, char* dst, Py_ssize_t want) except -2:
        """recv_into ``want`` bytes at ``dst``: bytes read (0 at end of stream), -1 if the
        socket would block."""
        cdef object view = PyMemoryView_FromMemory(dst, want, PyBUF_WRITE)
        cdef Py_ssize_t got
        try:
            got = sock.recv_into(view)
        except (BlockingIOError, InterruptedError):
            return -1
        finally:
            # The view does not own the memory: make sure no one can use it after this call.
            view.release()
        if got < 0 or got > want:
            raise ValueError(f"recv_into returned {got} for a {want}-byte buffer")
        self.received_bytes += got
        return got

    cdef int _closed(self) except -1:
        if self._frame is not None:
            raise KafkaConnectionError(
                f"connection closed by the peer after {self._frame_fill} of the "
                f"{self._frame_len} bytes of a frame")
        if self._end - self._start > 0:
            what = (f"{self._end - self._start - 4} of the {self.pending_frame_size} bytes of a frame"
                    if self._end - self._start >= 4 else "part of a frame size prefix")
            raise KafkaConnectionError(f"connection closed by the peer after {what}")
        raise KafkaConnectionError("connection closed by the peer")

    cdef list receive_c(self, object sock, bint drain, int wait_ms=0):
        cdef list frames = []
        cdef Py_ssize_t want, got
        cdef object exc
        cdef int fd = -1
        if self._error is not None:
            raise type(self._error)(*self._error.args)
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        self._split(frames)     # only ever finds an incomplete frame, but it is cheap
        while True:
            try:
                if self._frame is not None:
                    want = self._frame_len - self._frame_fill
                    got = self._recv(sock, self._frame_buf + self._frame_fill, want)
                    if got == 0:
                        self._closed()
                    if got > 0:
                        self._frame_fill += got
                        if self._frame_fill == self._frame_len:
                            frames.append(self._frame)
                            self._frame = None
                            self._frame_buf = NULL
                    if self._frame is not None and got < want and wait_ms > 0:
                        # The rest of a large frame is on its way (the broker writes a response
                        # as fast as the receive window lets it): wait for it here, without the
                        # GIL, rather than in a round of the caller's selector loop per window.
                        if fd < 0:
                            fd = sock.fileno()
                        if _readable_within(fd, wait_ms):
                            continue
                        return frames
                    if got < 0:
                        return frames
                else:
                    if self._start > 0 and self.buffer_size - self._end < self._direct_min:
                        # make room; what is moved is less than one small frame
                        memmove(self._buf, self._buf + self._start, self._end - self._start)
                        self._end -= self._start
                        self._start = 0
                    want = self.buffer_size - self._end
                    if want <= 0:   # cannot happen: a small frame always fits after compaction
                        raise AssertionError("FrameReceiver: receive buffer full")
                    got = self._recv(sock, self._buf + self._end, want)
                    if got < 0:
                        return frames
                    if got == 0:
                        self._closed()
                    self._end += got
                    self._split(frames)
            except (OSError, KafkaConnectionError) as e:
                # Only a draining call can get here with frames in hand: deliver them, and
                # raise the error with the next call (the socket stays readable after a
                # reset or end of stream, so there is one). A timeout is no error.
                if not frames:
                    raise
                if not isinstance(e, TimeoutError):
                    self._deferred = e
                return frames
            if got < want or (frames and not drain):
                return frames

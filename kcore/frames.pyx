# cython: language_level=3
"""Kafka request/response headers and the incremental length-prefixed frame splitter.

Every Kafka message on a socket is ``int32 size`` + ``size`` bytes. FrameSplitter is fed the
chunks a socket read returns and hands back complete frames (without the prefix). A frame
that arrives whole inside one chunk is returned without copying when it is large (a
memoryview slice of an immutable chunk); a frame split over several reads is copied once
into a bytes object allocated at its final size, so the total work stays linear in the
bytes received however the stream is cut. A negative or over-limit prefix raises before
anything is allocated for it.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.string cimport memcpy

from kcore.wire cimport load_be32

from kclient.errors import FrameTooLargeError, InvalidLengthError

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
                    length = <int32_t>load_be32(self._hdr)
                else:
                    length = <int32_t>load_be32(p + pos)
                    pos += 4
                if length < 0:
                    self._error = InvalidLengthError(f"negative frame size {length}")
                    raise self._error
                if length > self.max_frame_bytes:
                    self._error = FrameTooLargeError(
                        f"frame of {length} bytes exceeds the limit of "
                        f"{self.max_frame_bytes} bytes")
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

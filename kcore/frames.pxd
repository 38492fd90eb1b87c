# cython: language_level=3
"""C-level interface of kcore.frames: request/response headers and the frame splitter."""
from libc.stdint cimport int16_t, int32_t, uint8_t
from kcore.pool cimport CArray
from kcore.wire cimport Reader, Writer

# Request header v0: api_key, api_version, correlation_id; v1: + client_id (classic nullable
# string, even in v2); v2: + tagged fields. Response header v0: correlation_id; v1: + tags.
cdef int write_request_header(Writer w, int16_t api_key, int16_t api_version,
                              int32_t correlation_id, object client_id,
                              int header_version) except -1
cdef tuple read_request_header(Reader r, int header_version)
    # -> (api_key, api_version, correlation_id, client_id)
cdef int write_response_header(Writer w, int32_t correlation_id, int header_version) except -1
cdef int32_t read_response_header(Reader r, int header_version) except? -1


cdef class FrameSplitter:
    cdef readonly Py_ssize_t max_frame_bytes
    cdef uint8_t _hdr[4]           # partial 4-byte size prefix
    cdef int _hdr_len
    cdef bytes _partial            # frame being filled in place (we hold the only reference)
    cdef Py_ssize_t _partial_len
    cdef Py_ssize_t _partial_fill
    cdef object _error             # set once a bad prefix was seen: the stream is unusable

    cdef list feed_c(self, object chunk)


# ValueError unless 0 <= max_frame_bytes < 2**31 and 64 <= buffer_size < 2**31 (a receiver's
# frame size limit and receive buffer).
cdef int check_receive_sizes(Py_ssize_t max_frame_bytes, Py_ssize_t buffer_size) except -1


cdef class FrameReceiver:
    cdef readonly Py_ssize_t max_frame_bytes
    cdef readonly Py_ssize_t buffer_size
    cdef readonly long long received_bytes   # every byte read from sockets, for activity checks
    cdef Py_ssize_t _direct_min    # frames this large are received straight into their object
    cdef char* _buf                # reused receive buffer; unconsumed bytes in [_start, _end)
    cdef Py_ssize_t _start
    cdef Py_ssize_t _end
    cdef object _frame             # large Frame being received in place (only we reference it)
    cdef char* _frame_buf          # its memory
    cdef Py_ssize_t _frame_len
    cdef Py_ssize_t _frame_fill
    cdef object _error             # set once a bad prefix was seen: the stream is unusable
    cdef object _deferred          # socket error met after frames were read; raised next call

    cdef int _fail(self, int rc, int32_t length) except -1
    cdef int _split(self, list frames) except -1
    cdef Py_ssize_t _recv(self, object sock, char* dst, Py_ssize_t want) except -2
    cdef int _closed(self) except -1
    cdef list receive_c(self, object sock, bint drain, int wait_ms=*)


# A large received frame: a read-only buffer over a kcore.pool block (see frames.pyx).
cdef class Frame(CArray):
    pass

# Take ownership of a block (capb bytes at ptr, kcore.pool's kind) holding a complete frame of
# length bytes.
cdef Frame frame_over(void* ptr, Py_ssize_t length, size_t capb)

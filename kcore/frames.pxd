# cython: language_level=3
"""C-level interface of kcore.frames: request/response headers and the frame splitter."""
from libc.stdint cimport int16_t, int32_t, uint8_t
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

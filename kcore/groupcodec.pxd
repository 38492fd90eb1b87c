# cython: language_level=3
"""C interface of kcore.groupcodec: group heartbeat (classic, KIP-848, share) and LeaveGroup
requests and responses in C.

The functions never touch a Python object, so the GIL-free heartbeat loop (kcore.pacemaker)
encodes and decodes with them. Result codes are shared with that loop's I/O results.
"""
from libc.stdint cimport int16_t, int32_t, uint8_t

cdef enum:
    PM_MAX_STRING = 32767      # every string we send is a Kafka STRING (int16 length)
    PM_SBUF_CAP = 4 * 32768 + 256   # client id + group + member + instance (+ reason) at full length

# Decoder / I/O results (negative; 0 = OK).
cdef enum:
    PM_OK = 0
    PM_TRUNCATED = -1          # the frame ends before the message does
    PM_MALFORMED = -2          # a negative length, bad varint or (where checked) bad UTF-8
    PM_TRAILING = -3           # bytes left after the message
    PM_BAD_VERSION = -4        # a version this encoder does not speak
    PM_OVERFLOW = -5           # the output buffer is too small
    PM_IO = -10                # send/recv failed or the connection closed
    PM_TIMEOUT = -11           # no response within request.timeout.ms
    PM_TOO_BIG = -12           # response frame larger than PM_RECV_CAP
    PM_ABANDONED = -13         # reconfigured or stopped while waiting: the response no longer matters
    PM_CONNECT_FAILED = -14
    PM_CORRELATION = -15       # the response answers another request

cdef Py_ssize_t pm_encode_heartbeat(uint8_t* out, Py_ssize_t cap, int version, int32_t correlation_id,
                                    const char* client_id, Py_ssize_t client_id_len,
                                    const char* group_id, Py_ssize_t group_id_len, int32_t generation_id,
                                    const char* member_id, Py_ssize_t member_id_len,
                                    const char* instance_id, Py_ssize_t instance_id_len) noexcept nogil
cdef Py_ssize_t pm_encode_leave_group(uint8_t* out, Py_ssize_t cap, int version, int32_t correlation_id,
                                      const char* client_id, Py_ssize_t client_id_len,
                                      const char* group_id, Py_ssize_t group_id_len,
                                      const char* member_id, Py_ssize_t member_id_len,
                                      const char* instance_id, Py_ssize_t instance_id_len,
                                      const char* reason, Py_ssize_t reason_len) noexcept nogil
cdef int pm_decode_heartbeat_response(const uint8_t* p, Py_ssize_t n, int version, int32_t* correlation_id,
                                      int32_t* throttle_ms, int16_t* error_code) noexcept nogil
cdef Py_ssize_t pm_encode_consumer_group_heartbeat(uint8_t* out, Py_ssize_t cap, int version,
                                                   int32_t correlation_id,
                                                   const char* client_id, Py_ssize_t client_id_len,
                                                   const char* group_id, Py_ssize_t group_id_len,
                                                   const char* member_id, Py_ssize_t member_id_len,
                                                   int32_t member_epoch,
                                                   const char* instance_id, Py_ssize_t instance_id_len) noexcept nogil
cdef int pm_decode_consumer_group_heartbeat_response(const uint8_t* p, Py_ssize_t n, int version,
                                                     int32_t* correlation_id, int32_t* throttle_ms,
                                                     int16_t* error_code, int32_t* member_epoch,
                                                     int32_t* heartbeat_interval_ms,
                                                     int* has_assignment) noexcept nogil
cdef Py_ssize_t pm_encode_share_group_heartbeat(uint8_t* out, Py_ssize_t cap, int version,
                                                int32_t correlation_id,
                                                const char* client_id, Py_ssize_t client_id_len,
                                                const char* group_id, Py_ssize_t group_id_len,
                                                const char* member_id, Py_ssize_t member_id_len,
                                                int32_t member_epoch) noexcept nogil
cdef int pm_decode_share_group_heartbeat_response(const uint8_t* p, Py_ssize_t n, int version,
                                                  int32_t* correlation_id, int32_t* throttle_ms,
                                                  int16_t* error_code, int32_t* member_epoch,
                                                  int32_t* heartbeat_interval_ms,
                                                  int* has_assignment) noexcept nogil
cdef int pm_decode_leave_group_response(const uint8_t* p, Py_ssize_t n, int version, int32_t* correlation_id,
                                        int16_t* error_code) noexcept nogil

# Python-argument helpers shared with kcore.pacemaker (they raise naming the argument).
cdef bytes utf8_arg(object s, str what, bint nullable)
cdef int check_version(object version, int top, str api) except -1

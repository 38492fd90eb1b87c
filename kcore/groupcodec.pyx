# cython: language_level=3
"""Heartbeat and LeaveGroup (classic group protocol), ConsumerGroupHeartbeat (KIP-848) and
ShareGroupHeartbeat (KIP-932) in C.

Why a codec of its own when kcore.messages encodes every message: that codec builds and
reads Python dicts, so it needs the GIL. The GIL-free heartbeat loop (kcore.pacemaker)
needs these requests and their responses as plain C: Heartbeat versions 0-4 and
LeaveGroup 0-5 (flexible from v4: compact strings, tagged fields, request header v2), and
ConsumerGroupHeartbeat 0-1 (always flexible) in its short form: group, member, epoch and
instance id, every other field null or -1, which KIP-848 defines as "unchanged since the
last heartbeat" (a member's steady-state heartbeat, and its leave with epoch -1 / -2), and
ShareGroupHeartbeat 1 in the same short form (group, member, epoch; rack and subscription
null). The Python functions below wrap the C ones for tests and tools; tests check them byte for byte
against the schema-driven codec.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc

from kcore.wbuf cimport wb_finish, wb_i32, wb_init, wb_request_header, wb_str, wb_uvarint, wbuf
from kcore.wire cimport load_be16, load_be32, read_sized_ptr, read_uvarint32_ptr, skip_tagged_fields_ptr

__all__ = ["encode_heartbeat_request", "encode_leave_group_request", "decode_heartbeat_response",
           "decode_leave_group_response", "encode_consumer_group_heartbeat_request",
           "decode_consumer_group_heartbeat_response", "encode_share_group_heartbeat_request",
           "decode_share_group_heartbeat_response", "MAX_HEARTBEAT_VERSION", "MAX_LEAVE_GROUP_VERSION",
           "MAX_CONSUMER_GROUP_HEARTBEAT_VERSION", "MIN_SHARE_GROUP_HEARTBEAT_VERSION",
           "MAX_SHARE_GROUP_HEARTBEAT_VERSION"]

MAX_HEARTBEAT_VERSION = 4
MAX_LEAVE_GROUP_VERSION = 5
MAX_CONSUMER_GROUP_HEARTBEAT_VERSION = 1
# Version 0 was the early-access form (Kafka 4.0); production share groups speak 1.
MIN_SHARE_GROUP_HEARTBEAT_VERSION = 1
MAX_SHARE_GROUP_HEARTBEAT_VERSION = 1

cdef enum:
    _HEARTBEAT = 12
    _LEAVE_GROUP = 13
    _CONSUMER_GROUP_HEARTBEAT = 68
    _SHARE_GROUP_HEARTBEAT = 76
    _UUID_LEN = 16


# ---------------------------------------------------------------- encoding (nogil)
cdef inline bint _strings_ok(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d) noexcept nogil:
    return a <= PM_MAX_STRING and b <= PM_MAX_STRING and c <= PM_MAX_STRING and d <= PM_MAX_STRING

cdef Py_ssize_t pm_encode_heartbeat(uint8_t* out, Py_ssize_t cap, int version, int32_t correlation_id,
                                    const char* client_id, Py_ssize_t client_id_len,
                                    const char* group_id, Py_ssize_t group_id_len, int32_t generation_id,
                                    const char* member_id, Py_ssize_t member_id_len,
                                    const char* instance_id, Py_ssize_t instance_id_len) noexcept nogil:
    """Heartbeat request frame (size prefix included) into out; its length or a PM_* error."""
    cdef wbuf b
    cdef bint flex = version >= 4
    if version < 0 or version > 4:
        return PM_BAD_VERSION
    if group_id_len < 0 or member_id_len < 0 or not _strings_ok(client_id_len, group_id_len,
                                                                member_id_len, instance_id_len):
        return PM_OVERFLOW
    wb_init(&b, out, cap)
    wb_request_header(&b, _HEARTBEAT, version, correlation_id, client_id, client_id_len, flex)
    wb_str(&b, group_id, group_id_len, flex)
    wb_i32(&b, generation_id)
    wb_str(&b, member_id, member_id_len, flex)
    if version >= 3:
        wb_str(&b, instance_id, instance_id_len, flex)
    if flex:
        wb_uvarint(&b, 0)
    return wb_finish(&b, PM_OVERFLOW)

cdef Py_ssize_t pm_encode_leave_group(uint8_t* out, Py_ssize_t cap, int version, int32_t correlation_id,
                                      const char* client_id, Py_ssize_t client_id_len,
                                      const char* group_id, Py_ssize_t group_id_len,
                                      const char* member_id, Py_ssize_t member_id_len,
                                      const char* instance_id, Py_ssize_t instance_id_len,
                                      const char* reason, Py_ssize_t reason_len) noexcept nogil:
    """LeaveGroup request frame for one member; its length or a PM_* error."""
    cdef wbuf b
    cdef bint flex = version >= 4
    if version < 0 or version > 5:
        return PM_BAD_VERSION
    if group_id_len < 0 or member_id_len < 0 or reason_len > PM_MAX_STRING or not _strings_ok(
            client_id_len, group_id_len, member_id_len, instance_id_len):
        return PM_OVERFLOW
    wb_init(&b, out, cap)
    wb_request_header(&b, _LEAVE_GROUP, version, correlation_id, client_id, client_id_len, flex)
    wb_str(&b, group_id, group_id_len, flex)
    if version < 3:
        wb_str(&b, member_id, member_id_len, False)
    else:
        if flex:
            wb_uvarint(&b, 2)        # compact array of one member
        else:
            wb_i32(&b, 1)
        wb_str(&b, member_id, member_id_len, flex)
        wb_str(&b, instance_id, instance_id_len, flex)
        if version >= 5:
            wb_str(&b, reason, reason_len, flex)
        if flex:
            wb_uvarint(&b, 0)        # member's tagged fields
    if flex:
        wb_uvarint(&b, 0)
    return wb_finish(&b, PM_OVERFLOW)


cdef Py_ssize_t pm_encode_consumer_group_heartbeat(uint8_t* out, Py_ssize_t cap, int version,
                                                   int32_t correlation_id,
                                                   const char* client_id, Py_ssize_t client_id_len,
                                                   const char* group_id, Py_ssize_t group_id_len,
                                                   const char* member_id, Py_ssize_t member_id_len,
                                                   int32_t member_epoch,
                                                   const char* instance_id, Py_ssize_t instance_id_len) noexcept nogil:
    """ConsumerGroupHeartbeat request frame in its short form (see the module doc); its length
    or a PM_* error. member_epoch -1 / -2 makes it the member's leave."""
    cdef wbuf b
    if version < 0 or version > 1:
        return PM_BAD_VERSION
    if group_id_len < 0 or member_id_len < 0 or not _strings_ok(client_id_len, group_id_len,
                                                                member_id_len, instance_id_len):
        return PM_OVERFLOW
    wb_init(&b, out, cap)
    wb_request_header(&b, _CONSUMER_GROUP_HEARTBEAT, version, correlation_id, client_id, client_id_len, True)
    wb_str(&b, group_id, group_id_len, True)
    wb_str(&b, member_id, member_id_len, True)
    wb_i32(&b, member_epoch)
    wb_str(&b, instance_id, instance_id_len, True)
    wb_uvarint(&b, 0)                # rack_id: null (unchanged)
    wb_i32(&b, -1)                   # rebalance_timeout_ms: -1 (unchanged)
    wb_uvarint(&b, 0)                # subscribed_topic_names: null (unchanged)
    if version >= 1:
        wb_uvarint(&b, 0)            # subscribed_topic_regex: null (unchanged)
    wb_uvarint(&b, 0)                # server_assignor: null (unchanged)
    wb_uvarint(&b, 0)                # topic_partitions: null (unchanged)
    wb_uvarint(&b, 0)                # tagged fields
    return wb_finish(&b, PM_OVERFLOW)


cdef Py_ssize_t pm_encode_share_group_heartbeat(uint8_t* out, Py_ssize_t cap, int version,
                                                int32_t correlation_id,
                                                const char* client_id, Py_ssize_t client_id_len,
                                                const char* group_id, Py_ssize_t group_id_len,
                                                const char* member_id, Py_ssize_t member_id_len,
                                                int32_t member_epoch) noexcept nogil:
    """ShareGroupHeartbeat request frame in its short form (rack and subscription null: unchanged
    since the last heartbeat); its length or a PM_* error. member_epoch -1 makes it the leave."""
    cdef wbuf b
    if version < 1 or version > 1:
        return PM_BAD_VERSION
    if group_id_len < 0 or member_id_len < 0 or not _strings_ok(client_id_len, group_id_len,
                                                                member_id_len, 0):
        return PM_OVERFLOW
    wb_init(&b, out, cap)
    wb_request_header(&b, _SHARE_GROUP_HEARTBEAT, version, correlation_id, client_id, client_id_len, True)
    wb_str(&b, group_id, group_id_len, True)
    wb_str(&b, member_id, member_id_len, True)
    wb_i32(&b, member_epoch)
    wb_uvarint(&b, 0)                # rack_id: null (unchanged)
    wb_uvarint(&b, 0)                # subscribed_topic_names: null (unchanged)
    wb_uvarint(&b, 0)                # tagged fields
    return wb_finish(&b, PM_OVERFLOW)


# ---------------------------------------------------------------- decoding (nogil)
cdef inline int _r_tagged(const uint8_t** pp, const uint8_t* end) noexcept nogil:
    return skip_tagged_fields_ptr(pp, end, PM_TRUNCATED, PM_MALFORMED)

cdef inline int _r_skip_str(const uint8_t** pp, const uint8_t* end, bint compact, bint nullable) noexcept nogil:
    cdef const uint8_t* v
    cdef Py_ssize_t vn
    return read_sized_ptr(pp, end, compact, 2, nullable, &v, &vn, PM_TRUNCATED, PM_MALFORMED)

cdef inline bint _utf8_ok(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
    U+10FFFF), exactly what Python's strict decoder accepts."""
    cdef Py_ssize_t i = 0, k
    cdef int need
    cdef uint8_t c, lo, hi
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return 0
        if c < 0xE0:
            need, lo, hi = 1, 0x80, 0xBF
        elif c < 0xF0:
            need = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif c < 0xF5:
            need = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return 0
        if n - i - 1 < need or s[i + 1] < lo or s[i + 1] > hi:
            return 0
        for k in range(2, need + 1):
            if (s[i + k] & 0xC0) != 0x80:
                return 0
        i += need + 1
    return 1

cdef inline int _r_skip_utf8_str(const uint8_t** pp, const uint8_t* end) noexcept nogil:
    """A compact nullable string that must be valid UTF-8: the pacemaker hands such answers
    to the schema-driven codec, which would refuse anything else."""
    cdef const uint8_t* start = pp[0]
    cdef uint32_t u
    cdef int k = read_uvarint32_ptr(start, end, &u)
    cdef int rc = _r_skip_str(pp, end, True, True)
    if rc != PM_OK or k <= 0 or u <= 1:
        return rc
    return PM_OK if _utf8_ok(start + k, <Py_ssize_t>u - 1) else PM_MALFORMED

cdef inline int _r_response_header(const uint8_t** pp, const uint8_t* end, bint flex,
                                   int32_t* correlation_id) noexcept nogil:
    if end - pp[0] < 4:
        return PM_TRUNCATED
    correlation_id[0] = <int32_t>load_be32(pp[0])
    pp[0] += 4
    if flex:
        return _r_tagged(pp, end)
    return PM_OK

cdef int pm_decode_heartbeat_response(const uint8_t* p, Py_ssize_t n, int version, int32_t* correlation_id,
                                      int32_t* throttle_ms, int16_t* error_code) noexcept nogil:
    """Heartbeat response (frame without its size prefix): PM_OK or a PM_* error."""
    cdef const uint8_t* end = p + n
    cdef bint flex = version >= 4
    cdef int rc
    if version < 0 or version > 4:
        return PM_BAD_VERSION
    if n < 0:
        return PM_TRUNCATED
    rc = _r_response_header(&p, end, flex, correlation_id)
    if rc != PM_OK:
        return rc
    throttle_ms[0] = 0
    if version >= 1:
        if end - p < 4:
            return PM_TRUNCATED
        throttle_ms[0] = <int32_t>load_be32(p)
        p += 4
    if end - p < 2:
        return PM_TRUNCATED
    error_code[0] = <int16_t>load_be16(p)
    p += 2
    if flex:
        rc = _r_tagged(&p, end)
        if rc != PM_OK:
            return rc
    return PM_OK if p == end else PM_TRAILING

cdef int pm_decode_leave_group_response(const uint8_t* p, Py_ssize_t n, int version, int32_t* correlation_id,
                                        int16_t* error_code) noexcept nogil:
    """LeaveGroup response: the top-level error, else the first member's non-zero error."""
    cdef const uint8_t* end = p + n
    cdef bint flex = version >= 4
    cdef int rc, k
    cdef int64_t count
    cdef uint32_t u
    cdef int16_t member_error
    if version < 0 or version > 5:
        return PM_BAD_VERSION
    if n < 0:
        return PM_TRUNCATED
    rc = _r_response_header(&p, end, flex, correlation_id)
    if rc != PM_OK:
        return rc
    if version >= 1:
        if end - p < 4:
            return PM_TRUNCATED
        p += 4                               # throttle_time_ms
    if end - p < 2:
        return PM_TRUNCATED
    error_code[0] = <int16_t>load_be16(p)
    p += 2
    if version >= 3:
        if flex:
            k = read_uvarint32_ptr(p, end, &u)
            if k <= 0:
                return PM_TRUNCATED if p >= end else PM_MALFORMED
            p += k
            if u == 0:
                return PM_MALFORMED          # members is not nullable
            count = <int64_t>u - 1
        else:
            if end - p < 4:
                return PM_TRUNCATED
            count = <int32_t>load_be32(p)
            p += 4
            if count < 0:
                return PM_MALFORMED
        # every member takes at least 4 bytes: a huge count in a short frame is truncated
        if count > (end - p) // 4 + 1:
            return PM_TRUNCATED
        while count > 0:
            rc = _r_skip_str(&p, end, flex, False)          # member_id
            if rc != PM_OK:
                return rc
            rc = _r_skip_str(&p, end, flex, True)           # group_instance_id
            if rc != PM_OK:
                return rc
            if end - p < 2:
                return PM_TRUNCATED
            member_error = <int16_t>load_be16(p)
            p += 2
            if error_code[0] == 0 and member_error != 0:
                error_code[0] = member_error
            if flex:
                rc = _r_tagged(&p, end)
                if rc != PM_OK:
                    return rc
            count -= 1
    if flex:
        rc = _r_tagged(&p, end)
        if rc != PM_OK:
            return rc
    return PM_OK if p == end else PM_TRAILING


cdef inline int _r_compact_count(const uint8_t** pp, const uint8_t* end, Py_ssize_t min_size,
                                 int64_t* count) noexcept nogil:
    """A non-nullable compact array's element count; each element takes at least min_size
    bytes, so a count the rest of the frame cannot hold is truncation, not an allocation."""
    cdef uint32_t u
    cdef int k = read_uvarint32_ptr(pp[0], end, &u)
    if k <= 0:
        return PM_TRUNCATED if pp[0] >= end else PM_MALFORMED
    pp[0] += k
    if u == 0:
        return PM_MALFORMED
    count[0] = <int64_t>u - 1
    if count[0] > (end - pp[0]) // min_size:
        return PM_TRUNCATED
    return PM_OK

cdef int pm_decode_consumer_group_heartbeat_response(const uint8_t* p, Py_ssize_t n, int version,
                                                     int32_t* correlation_id, int32_t* throttle_ms,
                                                     int16_t* error_code, int32_t* member_epoch,
                                                     int32_t* heartbeat_interval_ms,
                                                     int* has_assignment) noexcept nogil:
    """ConsumerGroupHeartbeat response: the scalars, and whether it carries an assignment
    (validated, not returned: the caller keeps the frame for the schema-driven codec)."""
    if version < 0 or version > 1:
        return PM_BAD_VERSION
    return _decode_member_heartbeat_response(p, n, correlation_id, throttle_ms, error_code, member_epoch,
                                             heartbeat_interval_ms, has_assignment)

cdef int pm_decode_share_group_heartbeat_response(const uint8_t* p, Py_ssize_t n, int version,
                                                  int32_t* correlation_id, int32_t* throttle_ms,
                                                  int16_t* error_code, int32_t* member_epoch,
                                                  int32_t* heartbeat_interval_ms,
                                                  int* has_assignment) noexcept nogil:
    """ShareGroupHeartbeat response, as ConsumerGroupHeartbeat's: the two answers are laid out
    alike (error, member id and epoch, interval, a nullable assignment of topic ids and
    partitions)."""
    if version < 1 or version > 1:
        return PM_BAD_VERSION
    return _decode_member_heartbeat_response(p, n, correlation_id, throttle_ms, error_code, member_epoch,
                                             heartbeat_interval_ms, has_assignment)

cdef int _decode_member_heartbeat_response(const uint8_t* p, Py_ssize_t n,
                                           int32_t* correlation_id, int32_t* throttle_ms,
                                           int16_t* error_code, int32_t* member_epoch,
                                           int32_t* heartbeat_interval_ms,
                                           int* has_assignment) noexcept nogil:
    cdef const uint8_t* end = p + n
    cdef int rc
    cdef int64_t topics, parts
    if n < 0:
        return PM_TRUNCATED
    rc = _r_response_header(&p, end, True, correlation_id)
    if rc != PM_OK:
        return rc
    if end - p < 6:
        return PM_TRUNCATED
    throttle_ms[0] = <int32_t>load_be32(p)
    error_code[0] = <int16_t>load_be16(p + 4)
    p += 6
    rc = _r_skip_utf8_str(&p, end)                    # error_message
    if rc != PM_OK:
        return rc
    rc = _r_skip_utf8_str(&p, end)                    # member_id
    if rc != PM_OK:
        return rc
    if end - p < 9:
        return PM_TRUNCATED
    member_epoch[0] = <int32_t>load_be32(p)
    heartbeat_interval_ms[0] = <int32_t>load_be32(p + 4)
    p += 8
    # assignment: a nullable struct, int8 marker first (-1 null)
    has_assignment[0] = 0
    if <int8_t>p[0] >= 0:
        has_assignment[0] = 1
        p += 1
        rc = _r_compact_count(&p, end, _UUID_LEN + 2, &topics)
        if rc != PM_OK:
            return rc
        while topics > 0:
            if end - p < _UUID_LEN:
                return PM_TRUNCATED
            p += _UUID_LEN
            rc = _r_compact_count(&p, end, 4, &parts)
            if rc != PM_OK:
                return rc
            p += 4 * parts
            rc = _r_tagged(&p, end)
            if rc != PM_OK:
                return rc
            topics -= 1
        rc = _r_tagged(&p, end)                   # the assignment's tagged fields
        if rc != PM_OK:
            return rc
    else:
        p += 1
    rc = _r_tagged(&p, end)
    if rc != PM_OK:
        return rc
    return PM_OK if p == end else PM_TRAILING


# ---------------------------------------------------------------- Python wrappers of the codec
_CODEC_ERRORS = {
    PM_TRUNCATED: "truncated response: the frame ends before the message does",
    PM_MALFORMED: "malformed response: a negative length, null non-nullable field, bad varint or bad UTF-8",
    PM_TRAILING: "malformed response: bytes left after the message",
    PM_BAD_VERSION: "unsupported version",
    PM_OVERFLOW: "a string is longer than 32767 bytes (a Kafka STRING's limit)",
}


cdef bytes utf8_arg(object s, str what, bint nullable):
    if s is None:
        if nullable:
            return None
        raise TypeError(f"{what} must be a str, not None")
    if not isinstance(s, str):
        raise TypeError(f"{what} must be a str, not {type(s).__name__}")
    b = (<str>s).encode("utf-8")
    if len(b) > PM_MAX_STRING:
        raise ValueError(f"{what} is {len(b)} bytes long; a Kafka STRING holds at most 32767")
    return b


cdef inline const char* _ptr(bytes b) noexcept:
    return NULL if b is None else PyBytes_AS_STRING(b)


cdef inline Py_ssize_t _len(bytes b) noexcept:
    return -1 if b is None else len(b)


cdef uint8_t* _frame_buffer() except NULL:
    """A buffer for one request frame (PM_SBUF_CAP bytes), for _frame to free."""
    cdef uint8_t* buf = <uint8_t*>malloc(PM_SBUF_CAP)
    if buf == NULL:
        raise MemoryError()
    return buf


cdef bytes _frame(uint8_t* buf, Py_ssize_t n):
    """The n bytes an encoder wrote into buf (which is freed), or its PM_* error n as ValueError."""
    try:
        if n < 0:
            raise ValueError(_CODEC_ERRORS[n])
        return PyBytes_FromStringAndSize(<char*>buf, n)
    finally:
        free(buf)


cdef uint8_t _NO_BYTES = 0


cdef inline const uint8_t* _frame_ptr(const uint8_t[::1] v) noexcept:
    # A valid pointer for an empty frame too (the decoders read nothing then).
    return &v[0] if v.shape[0] else &_NO_BYTES


cdef int check_version(object version, int top, str api) except -1:
    if not isinstance(version, int) or version < 0 or version > top:
        raise ValueError(f"{api} version {version!r} is not supported (0..{top})")
    return 0


def encode_heartbeat_request(version, correlation_id, client_id, group_id, generation_id, member_id,
                             group_instance_id=None):
    """Whole Heartbeat request frame (size prefix included), encoded by the C encoder."""
    check_version(version, 4, "Heartbeat")
    cdef bytes cid = utf8_arg(client_id, "client_id", True)
    cdef bytes g = utf8_arg(group_id, "group_id", False)
    cdef bytes m = utf8_arg(member_id, "member_id", False)
    cdef bytes i = utf8_arg(group_instance_id, "group_instance_id", True)
    cdef int32_t corr = correlation_id
    cdef int32_t gen = generation_id
    cdef uint8_t* buf = _frame_buffer()
    return _frame(buf, pm_encode_heartbeat(buf, PM_SBUF_CAP, version, corr, _ptr(cid), _len(cid), _ptr(g), _len(g), gen,
                                           _ptr(m), _len(m), _ptr(i), _len(i)))


def encode_leave_group_request(version, correlation_id, client_id, group_id, member_id,
                               group_instance_id=None, reason=None):
    """Whole LeaveGroup request frame for one member, encoded by the C encoder."""
    check_version(version, 5, "LeaveGroup")
    cdef bytes cid = utf8_arg(client_id, "client_id", True)
    cdef bytes g = utf8_arg(group_id, "group_id", False)
    cdef bytes m = utf8_arg(member_id, "member_id", False)
    cdef bytes i = utf8_arg(group_instance_id, "group_instance_id", True)
    cdef bytes r = utf8_arg(reason, "reason", True)
    cdef int32_t corr = correlation_id
    cdef uint8_t* buf = _frame_buffer()
    return _frame(buf, pm_encode_leave_group(buf, PM_SBUF_CAP, version, corr, _ptr(cid), _len(cid), _ptr(g), _len(g),
                                             _ptr(m), _len(m), _ptr(i), _len(i), _ptr(r), _len(r)))


def decode_heartbeat_response(version, frame):
    """(correlation_id, throttle_time_ms, error_code) of a Heartbeat response frame (no size prefix)."""
    check_version(version, 4, "Heartbeat")
    cdef const uint8_t[::1] v = frame
    cdef int32_t corr = 0, throttle = 0
    cdef int16_t err = 0
    cdef const uint8_t* ptr = _frame_ptr(v)
    cdef int rc = pm_decode_heartbeat_response(ptr, v.shape[0], version,
                                               &corr, &throttle, &err)
    if rc != PM_OK:
        raise ValueError(f"Heartbeat v{version} {_CODEC_ERRORS[rc]}")
    return corr, throttle, err


def decode_leave_group_response(version, frame):
    """(correlation_id, error_code) of a LeaveGroup response frame (no size prefix)."""
    check_version(version, 5, "LeaveGroup")
    cdef const uint8_t[::1] v = frame
    cdef int32_t corr = 0
    cdef int16_t err = 0
    cdef const uint8_t* ptr = _frame_ptr(v)
    cdef int rc = pm_decode_leave_group_response(ptr, v.shape[0], version,
                                                 &corr, &err)
    if rc != PM_OK:
        raise ValueError(f"LeaveGroup v{version} {_CODEC_ERRORS[rc]}")
    return corr, err


def encode_consumer_group_heartbeat_request(version, correlation_id, client_id, group_id, member_id,
                                            member_epoch, instance_id=None):
    """Whole ConsumerGroupHeartbeat request frame in its short form, encoded by the C encoder."""
    check_version(version, 1, "ConsumerGroupHeartbeat")
    cdef bytes cid = utf8_arg(client_id, "client_id", True)
    cdef bytes g = utf8_arg(group_id, "group_id", False)
    cdef bytes m = utf8_arg(member_id, "member_id", False)
    cdef bytes i = utf8_arg(instance_id, "instance_id", True)
    cdef int32_t corr = correlation_id
    cdef int32_t epoch = member_epoch
    cdef uint8_t* buf = _frame_buffer()
    return _frame(buf, pm_encode_consumer_group_heartbeat(buf, PM_SBUF_CAP, version, corr, _ptr(cid), _len(cid),
                                                          _ptr(g), _len(g), _ptr(m), _len(m), epoch, _ptr(i), _len(i)))


def decode_consumer_group_heartbeat_response(version, frame):
    """(correlation_id, throttle_time_ms, error_code, member_epoch, heartbeat_interval_ms,
    has_assignment) of a ConsumerGroupHeartbeat response frame (no size prefix)."""
    check_version(version, 1, "ConsumerGroupHeartbeat")
    cdef const uint8_t[::1] v = frame
    cdef int32_t corr = 0, throttle = 0, epoch = 0, interval = 0
    cdef int16_t err = 0
    cdef int has = 0
    cdef const uint8_t* ptr = _frame_ptr(v)
    cdef int rc = pm_decode_consumer_group_heartbeat_response(ptr, v.shape[0], version, &corr, &throttle,
                                                              &err, &epoch, &interval, &has)
    if rc != PM_OK:
        raise ValueError(f"ConsumerGroupHeartbeat v{version} {_CODEC_ERRORS[rc]}")
    return corr, throttle, err, epoch, interval, bool(has)


def encode_share_group_heartbeat_request(version, correlation_id, client_id, group_id, member_id, member_epoch):
    """Whole ShareGroupHeartbeat request frame in its short form, encoded by the C encoder."""
    _check_share_version(version)
    cdef bytes cid = utf8_arg(client_id, "client_id", True)
    cdef bytes g = utf8_arg(group_id, "group_id", False)
    cdef bytes m = utf8_arg(member_id, "member_id", False)
    cdef int32_t corr = correlation_id
    cdef int32_t epoch = member_epoch
    cdef uint8_t* buf = _frame_buffer()
    return _frame(buf, pm_encode_share_group_heartbeat(buf, PM_SBUF_CAP, version, corr, _ptr(cid), _len(cid),
                                                       _ptr(g), _len(g), _ptr(m), _len(m), epoch))


def decode_share_group_heartbeat_response(version, frame):
    """(correlation_id, throttle_time_ms, error_code, member_epoch, heartbeat_interval_ms,
    has_assignment) of a ShareGroupHeartbeat response frame (no size prefix)."""
    _check_share_version(version)
    cdef const uint8_t[::1] v = frame
    cdef int32_t corr = 0, throttle = 0, epoch = 0, interval = 0
    cdef int16_t err = 0
    cdef int has = 0
    cdef const uint8_t* ptr = _frame_ptr(v)
    cdef int rc = pm_decode_share_group_heartbeat_response(ptr, v.shape[0], version, &corr, &throttle,
                                                           &err, &epoch, &interval, &has)
    if rc != PM_OK:
        raise ValueError(f"ShareGroupHeartbeat v{version} {_CODEC_ERRORS[rc]}")
    return corr, throttle, err, epoch, interval, bool(has)


cdef int _check_share_version(object version) except -1:
    check_version(version, 1, "ShareGroupHeartbeat")
    if version < 1:
        raise ValueError("ShareGroupHeartbeat version 0 (Kafka 4.0's early access) is not supported (1..1)")
    return 0

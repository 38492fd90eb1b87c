# cython: language_level=3
"""Validation of record-batch bodies into position arrays (no Python objects).

scan_v2 walks the records of one v2 batch and parse_legacy / scan_legacy_inner the messages
of format v0/v1, checking every length and varint against the bytes around it and storing
each record's offset, timestamp and key/value/header positions into a RecCols (parallel C
arrays). They run without the GIL; the caller turns a returned error code (details in
ScanErr) into the matching CorruptRecordError subclass. Byte order and varints come from
kcore.wire, field positions from kcore.layout.
"""
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, intptr_t, INT32_MAX
from libc.stdlib cimport realloc
from libc.string cimport memset

from kcore.crc cimport crc32_ieee_update
from kcore.layout cimport (ENTRY_BASE_OFFSET, ENTRY_LENGTH, ENTRY_MAGIC, LOG_OVERHEAD,
                           MIN_RECORD_BYTES, LEGACY_CRC, LEGACY_ATTRIBUTES, LEGACY_TIMESTAMP,
                           LEGACY_MIN_SIZE, ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE)
from kcore.pool cimport pool_take, pool_give, pool_size_class
from kcore.wire cimport (load_be16, load_be32, load_be64, read_varint_ptr, read_varlong_ptr,
                         WIRE_BAD_VARINT)


# ---------------------------------------------------------------------------- prefetch
# Each record's start is known only once the previous record's length was read, so a scan
# whose bytes are not in the core's cache waits for memory once per record. Asking for the
# bytes a few records ahead (and for the next record's header as soon as its position is
# known) took the scan of an 8 MiB answer of 100 B records from about 1.6 to 0.9 ms without
# the CRC check, 1.6 to 1.3 ms with it (best of 40, on a 2-core VM). A prefetch never faults.
cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define kc_prefetch(p) __builtin_prefetch((p), 0, 3)
    #else
    #define kc_prefetch(p) ((void)(p))
    #endif
    """
    void kc_prefetch(const void* p) noexcept nogil

cdef enum:
    PREFETCH_AHEAD = 512        # bytes: four or five records of 100 B values


# ---------------------------------------------------------------------------- varints
# kcore.wire decodes; these adapt its result (bytes consumed or a WIRE_* code) to the
# scanner's pointer-advancing style and error codes (running out of bytes inside a record
# is corruption, not an underflow: the batch's length said the bytes were there).
cdef inline int rd_varint(const uint8_t** pp, const uint8_t* end, int32_t* out) noexcept nogil:
    cdef int n = read_varint_ptr(pp[0], end, out)
    if n > 0:
        pp[0] += n
        return E_OK
    return E_VARINT if n == WIRE_BAD_VARINT else E_CORRUPT


cdef inline int rd_varlong(const uint8_t** pp, const uint8_t* end, int64_t* out) noexcept nogil:
    cdef int n = read_varlong_ptr(pp[0], end, out)
    if n > 0:
        pp[0] += n
        return E_OK
    return E_VARINT if n == WIRE_BAD_VARINT else E_CORRUPT


# ---------------------------------------------------------------------------- arrays
cdef inline int _set_err(ScanErr* e, int code, const char* what, int64_t value,
                         int64_t index) noexcept nogil:
    e.code = code
    e.what = what
    e.value = value
    e.index = index
    return code


cdef inline bint _grow(void** p, size_t nbytes) noexcept nogil:
    cdef void* q = realloc(p[0], nbytes if nbytes else 1)
    if q == NULL:
        return False
    p[0] = q
    return True


cdef int cols_reserve(RecCols* c, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t need = c.n + extra
    cdef Py_ssize_t cap
    if extra < 0 or need > INT32_MAX:
        return -1
    if need <= c.cap:
        return 0
    cap = c.cap * 2
    if cap < need:
        cap = need
    if cap < 16:
        cap = 16
    if not (_grow(<void**>&c.offset, cap * 8) and _grow(<void**>&c.timestamp, cap * 8)
            and _grow(<void**>&c.ts_type, cap) and _grow(<void**>&c.key_pos, cap * 8)
            and _grow(<void**>&c.key_len, cap * 4) and _grow(<void**>&c.val_pos, cap * 8)
            and _grow(<void**>&c.val_len, cap * 4)
            and _grow(<void**>&c.hdr_start, (cap + 1) * 4)):
        return -1
    if c.cap == 0:
        c.hdr_start[0] = 0
    c.cap = cap
    return 0


cdef int cols_reserve_h(RecCols* c, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t need = c.nh + extra
    cdef Py_ssize_t cap
    if extra < 0 or need > INT32_MAX:
        return -1
    if need <= c.caph:
        return 0
    cap = c.caph * 2
    if cap < need:
        cap = need
    if cap < 16:
        cap = 16
    if not (_grow(<void**>&c.hk_pos, cap * 8) and _grow(<void**>&c.hk_len, cap * 4)
            and _grow(<void**>&c.hv_pos, cap * 8) and _grow(<void**>&c.hv_len, cap * 4)):
        return -1
    c.caph = cap
    return 0


cdef int cols_prereserve(RecCols* c, Py_ssize_t count) except -1:
    """With the GIL: size the record arrays for `count` records from the pool.

    `count` comes from batch headers, so it is capped: beyond the cap the scan grows the
    arrays from the records actually present."""
    cdef size_t got
    if count > (1 << 20):
        count = 1 << 20
    # In size classes: the next decode of about as many records reuses these blocks.
    count = <Py_ssize_t>pool_size_class(<size_t>count)
    if count <= c.cap:
        return 0
    if c.cap == 0 and c.offset == NULL:
        c.offset = <int64_t*>pool_take(count * 8, &got)
        c.timestamp = <int64_t*>pool_take(count * 8, &got)
        c.ts_type = <int8_t*>pool_take(count, &got)
        c.key_pos = <int64_t*>pool_take(count * 8, &got)
        c.key_len = <int32_t*>pool_take(count * 4, &got)
        c.val_pos = <int64_t*>pool_take(count * 8, &got)
        c.val_len = <int32_t*>pool_take(count * 4, &got)
        c.hdr_start = <int32_t*>pool_take((count + 1) * 4, &got)
        if (c.offset == NULL or c.timestamp == NULL or c.ts_type == NULL or c.key_pos == NULL
                or c.key_len == NULL or c.val_pos == NULL or c.val_len == NULL
                or c.hdr_start == NULL):
            raise MemoryError()
        c.hdr_start[0] = 0
        c.cap = count
        return 0
    if cols_reserve(c, count - c.n) < 0:
        raise MemoryError()
    return 0


cdef void cols_release(RecCols* c) noexcept:
    """With the GIL: give the arrays back to the pool (NULL entries were handed over)."""
    cdef size_t cap = <size_t>c.cap, caph = <size_t>c.caph
    pool_give(c.offset, cap * 8)
    pool_give(c.timestamp, cap * 8)
    pool_give(c.ts_type, cap)
    pool_give(c.key_pos, cap * 8)
    pool_give(c.key_len, cap * 4)
    pool_give(c.val_pos, cap * 8)
    pool_give(c.val_len, cap * 4)
    pool_give(c.hdr_start, (cap + 1) * 4)
    pool_give(c.hk_pos, caph * 8)
    pool_give(c.hk_len, caph * 4)
    pool_give(c.hv_pos, caph * 8)
    pool_give(c.hv_len, caph * 4)
    memset(c, 0, sizeof(RecCols))


cdef inline int _varint_err(ScanErr* e, int rc, const char* field, int64_t idx) noexcept nogil:
    if rc == E_VARINT:
        return _set_err(e, E_VARINT, field, 0, idx)
    return _set_err(e, E_CORRUPT, field, 0, idx)


cdef int scan_v2(const uint8_t* region, size_t rlen, int32_t count, V2Ctx* ctx,
                 const uint8_t* origin, int64_t bias, RecCols* c, ScanErr* err) noexcept nogil:
    """Validate `count` records in region[0:rlen] and append their positions to `c`.

    Positions are stored as (address - origin) + bias, so one scanner serves the per-record
    path (absolute addresses) and the columnar path (offsets into its data buffer).
    Array pointers live in locals: the module is built with -fno-strict-aliasing, so a store
    through `c->x[i]` would otherwise force every other field of `c` to be reloaded.
    """
    cdef const uint8_t* p = region
    cdef const uint8_t* end = region + rlen
    cdef const uint8_t* rend
    cdef int32_t rec_len, off_delta, klen, vlen, hcount, hkl, hvl
    cdef int64_t ts_delta, off
    cdef int rc
    cdef Py_ssize_t i, j, k, n, nh
    cdef int64_t base_offset = ctx.base_offset, base_ts = ctx.base_ts, max_ts = ctx.max_ts
    cdef int64_t min_offset = ctx.min_offset
    cdef bint log_append = ctx.log_append
    cdef int8_t ts_type = ctx.ts_type
    cdef int64_t* a_off
    cdef int64_t* a_ts
    cdef int8_t* a_tt
    cdef int64_t* a_kp
    cdef int32_t* a_kl
    cdef int64_t* a_vp
    cdef int32_t* a_vl
    cdef int32_t* a_hs
    cdef int64_t* h_kp
    cdef int32_t* h_kl
    cdef int64_t* h_vp
    cdef int32_t* h_vl
    cdef int64_t delta = bias - <int64_t><intptr_t>origin
    if count < 0:
        return _set_err(err, E_LENGTH, "negative record count", count, -1)
    if <size_t>count > rlen // MIN_RECORD_BYTES:
        return _set_err(err, E_CORRUPT, "record count exceeds the records present", count, -1)
    if cols_reserve(c, count) < 0:
        return _set_err(err, E_NOMEM, "record arrays", count, -1)
    a_off = c.offset
    a_ts = c.timestamp
    a_tt = c.ts_type
    a_kp = c.key_pos
    a_kl = c.key_len
    a_vp = c.val_pos
    a_vl = c.val_len
    a_hs = c.hdr_start
    h_kp = c.hk_pos
    h_kl = c.hk_len
    h_vp = c.hv_pos
    h_vl = c.hv_len
    n = c.n
    nh = c.nh
    for i in range(count):
        kc_prefetch(p + PREFETCH_AHEAD if end - p > PREFETCH_AHEAD else end)
        rc = rd_varint(&p, end, &rec_len)
        if rc:
            return _varint_err(err, rc, "record length", i)
        if rec_len < 0:
            return _set_err(err, E_LENGTH, "negative record length", rec_len, i)
        if rec_len > end - p:
            return _set_err(err, E_LENGTH, "record length exceeds the batch", rec_len, i)
        rend = p + rec_len
        kc_prefetch(rend)                        # the next record's header (far, for large values)
        if p >= rend:
            return _set_err(err, E_CORRUPT, "empty record", 0, i)
        p += 1                                   # record attributes: unused by Kafka
        rc = rd_varlong(&p, rend, &ts_delta)
        if rc:
            return _varint_err(err, rc, "timestamp delta", i)
        rc = rd_varint(&p, rend, &off_delta)
        if rc:
            return _varint_err(err, rc, "offset delta", i)
        rc = rd_varint(&p, rend, &klen)
        if rc:
            return _varint_err(err, rc, "key length", i)
        if klen < -1:
            return _set_err(err, E_LENGTH, "negative key length", klen, i)
        if klen > rend - p:
            return _set_err(err, E_LENGTH, "key length exceeds the record", klen, i)
        a_kl[n] = klen
        a_kp[n] = <int64_t><intptr_t>p + delta
        if klen > 0:
            p += klen
        rc = rd_varint(&p, rend, &vlen)
        if rc:
            return _varint_err(err, rc, "value length", i)
        if vlen < -1:
            return _set_err(err, E_LENGTH, "negative value length", vlen, i)
        if vlen > rend - p:
            return _set_err(err, E_LENGTH, "value length exceeds the record", vlen, i)
        a_vl[n] = vlen
        a_vp[n] = <int64_t><intptr_t>p + delta
        if vlen > 0:
            p += vlen
        rc = rd_varint(&p, rend, &hcount)
        if rc:
            return _varint_err(err, rc, "header count", i)
        k = nh
        if hcount:
            if hcount < 0:
                return _set_err(err, E_LENGTH, "negative header count", hcount, i)
            if hcount > (rend - p) // 2:
                return _set_err(err, E_LENGTH, "header count exceeds the record", hcount, i)
            if k + hcount > c.caph:
                c.nh = nh
                if cols_reserve_h(c, hcount) < 0:
                    return _set_err(err, E_NOMEM, "header arrays", hcount, i)
                h_kp = c.hk_pos
                h_kl = c.hk_len
                h_vp = c.hv_pos
                h_vl = c.hv_len
            for j in range(hcount):
                rc = rd_varint(&p, rend, &hkl)
                if rc:
                    return _varint_err(err, rc, "header key length", i)
                if hkl < 0:
                    return _set_err(err, E_LENGTH, "negative header key length", hkl, i)
                if hkl > rend - p:
                    return _set_err(err, E_LENGTH, "header key length exceeds the record", hkl, i)
                h_kl[k] = hkl
                h_kp[k] = <int64_t><intptr_t>p + delta
                p += hkl
                rc = rd_varint(&p, rend, &hvl)
                if rc:
                    return _varint_err(err, rc, "header value length", i)
                if hvl < -1:
                    return _set_err(err, E_LENGTH, "negative header value length", hvl, i)
                if hvl > rend - p:
                    return _set_err(err, E_LENGTH, "header value length exceeds the record", hvl, i)
                h_vl[k] = hvl
                h_vp[k] = <int64_t><intptr_t>p + delta
                if hvl > 0:
                    p += hvl
                k += 1
        if p != rend:
            return _set_err(err, E_CORRUPT, "record length does not match its fields",
                            rec_len, i)
        # Continue from rend (known as soon as the length varint is read) rather than from p
        # (known only after every field): the next record's loads need not wait for this one.
        p = rend
        off = add_wrap(base_offset, off_delta)
        if off < min_offset:
            continue                             # before the fetch position: drop, headers too
        a_off[n] = off
        a_ts[n] = max_ts if log_append else add_wrap(base_ts, ts_delta)
        a_tt[n] = ts_type
        a_hs[n] = <int32_t>nh
        a_hs[n + 1] = <int32_t>k
        nh = k
        n += 1
    c.n = n
    c.nh = nh
    if p != end:
        return _set_err(err, E_CORRUPT, "bytes left after the declared record count",
                        end - p, -1)
    return E_OK


cdef int control_type_of(const uint8_t* region, size_t rlen, int* out, ScanErr* err) noexcept nogil:
    """Type of the first control record of a control batch (key: version int16, type int16)."""
    cdef const uint8_t* p = region
    cdef const uint8_t* end = region + rlen
    cdef const uint8_t* rend
    cdef int32_t rec_len, tmp, klen
    cdef int64_t tmp64
    cdef int rc
    rc = rd_varint(&p, end, &rec_len)
    if rc:
        return _varint_err(err, rc, "control record length", 0)
    if rec_len < 0 or rec_len > end - p:
        return _set_err(err, E_LENGTH, "control record length exceeds the batch", rec_len, 0)
    rend = p + rec_len
    if p >= rend:
        return _set_err(err, E_CORRUPT, "empty control record", 0, 0)
    p += 1
    rc = rd_varlong(&p, rend, &tmp64)
    if rc == E_OK:
        rc = rd_varint(&p, rend, &tmp)
    if rc == E_OK:
        rc = rd_varint(&p, rend, &klen)
    if rc:
        return _varint_err(err, rc, "control record header", 0)
    if klen < 4 or klen > rend - p:
        return _set_err(err, E_CORRUPT, "control record key shorter than 4 bytes", klen, 0)
    out[0] = <int16_t>load_be16(p + 2)
    return E_OK


cdef int parse_legacy(const uint8_t* p, size_t avail, LegacyMsg* m, ScanErr* err) noexcept nogil:
    """Parse one legacy message (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    cdef const uint8_t* q
    cdef const uint8_t* end
    if avail < LOG_OVERHEAD:
        return _set_err(err, E_CORRUPT, "truncated message header", <int64_t>avail, -1)
    m.offset = <int64_t>load_be64(p + ENTRY_BASE_OFFSET)
    m.size = <int32_t>load_be32(p + ENTRY_LENGTH)
    if m.size < LEGACY_MIN_SIZE:
        return _set_err(err, E_LENGTH, "message size below the minimum of 14", m.size, -1)
    if <size_t>m.size > avail - LOG_OVERHEAD:
        return _set_err(err, E_CORRUPT, "message size exceeds the bytes present", m.size, -1)
    end = p + LOG_OVERHEAD + m.size
    m.crc = load_be32(p + LEGACY_CRC)
    m.magic = p[ENTRY_MAGIC]
    m.attr = p[LEGACY_ATTRIBUTES]
    q = p + LEGACY_TIMESTAMP
    if m.magic == 1:
        if end - q < 8:
            return _set_err(err, E_CORRUPT, "message too short for its timestamp", m.size, -1)
        m.timestamp = <int64_t>load_be64(q)
        q += 8
    elif m.magic == 0:
        m.timestamp = -1
    else:
        return _set_err(err, E_CORRUPT, "unknown message magic", m.magic, -1)
    if end - q < 4:
        return _set_err(err, E_CORRUPT, "message too short for its key length", m.size, -1)
    m.klen = <int32_t>load_be32(q)
    q += 4
    if m.klen < -1:
        return _set_err(err, E_LENGTH, "negative key length", m.klen, -1)
    if m.klen > end - q:
        return _set_err(err, E_LENGTH, "key length exceeds the message", m.klen, -1)
    m.key = q
    if m.klen > 0:
        q += m.klen
    if end - q < 4:
        return _set_err(err, E_CORRUPT, "message too short for its value length", m.size, -1)
    m.vlen = <int32_t>load_be32(q)
    q += 4
    if m.vlen < -1:
        return _set_err(err, E_LENGTH, "negative value length", m.vlen, -1)
    if m.vlen > end - q:
        return _set_err(err, E_LENGTH, "value length exceeds the message", m.vlen, -1)
    m.val = q
    if m.vlen > 0:
        q += m.vlen
    if q != end:
        return _set_err(err, E_CORRUPT, "message size does not match its fields", m.size, -1)
    return E_OK


cdef bint legacy_crc_ok(const uint8_t* p, LegacyMsg* m) noexcept nogil:
    return crc32_ieee_update(0, p + ENTRY_MAGIC, <size_t>(m.size - 4)) == m.crc


cdef int store_one(RecCols* c, int64_t offset, int64_t ts, int8_t ts_type, LegacyMsg* m,
                   const uint8_t* origin, int64_t bias) noexcept nogil:
    cdef Py_ssize_t n
    if cols_reserve(c, 1) < 0:
        return -1
    n = c.n
    c.offset[n] = offset
    c.timestamp[n] = ts
    c.ts_type[n] = ts_type
    c.key_len[n] = m.klen
    c.key_pos[n] = (m.key - origin) + bias
    c.val_len[n] = m.vlen
    c.val_pos[n] = (m.val - origin) + bias
    c.hdr_start[n] = <int32_t>c.nh
    c.hdr_start[n + 1] = <int32_t>c.nh
    c.n = n + 1
    return 0


cdef int scan_legacy_inner(const uint8_t* region, size_t rlen, LegacyMsg* w, bint check_crcs,
                           int64_t min_offset, const uint8_t* origin, int64_t bias,
                           RecCols* c, int64_t* first_offset, int32_t* count_out,
                           ScanErr* err) noexcept nogil:
    """The message set inside a compressed wrapper: complete messages only, no nesting."""
    cdef const uint8_t* p = region
    cdef const uint8_t* end = region + rlen
    cdef int32_t size
    cdef int32_t count = 0
    cdef int64_t last_rel = 0, base = 0, off, ts
    cdef int8_t ts_type
    cdef LegacyMsg m
    cdef int rc
    # Pass 1: framing only.  v1 inner offsets are relative to the last one, so find it first.
    while p < end:
        if end - p < LOG_OVERHEAD:
            return _set_err(err, E_CORRUPT, "truncated message inside a compressed wrapper",
                            end - p, count)
        size = <int32_t>load_be32(p + ENTRY_LENGTH)
        if size < LEGACY_MIN_SIZE:
            return _set_err(err, E_LENGTH, "inner message size below the minimum of 14",
                            size, count)
        if size > end - p - LOG_OVERHEAD:
            return _set_err(err, E_CORRUPT, "inner message exceeds its compressed wrapper",
                            size, count)
        last_rel = <int64_t>load_be64(p + ENTRY_BASE_OFFSET)
        count += 1
        p += LOG_OVERHEAD + size
    if count == 0:
        return _set_err(err, E_CORRUPT, "compressed wrapper holds no messages", 0, -1)
    count_out[0] = count
    if w.magic > 0:
        base = w.offset - last_rel
    if cols_reserve(c, count) < 0:
        return _set_err(err, E_NOMEM, "record arrays", count, -1)
    p = region
    count = 0
    while p < end:
        rc = parse_legacy(p, <size_t>(end - p), &m, err)
        if rc:
            err.index = count
            return rc
        if check_crcs and not legacy_crc_ok(p, &m):
            return _set_err(err, E_CRC, "inner message CRC mismatch", m.crc, count)
        if m.attr & ATTR_CODEC_MASK:
            return _set_err(err, E_CORRUPT, "nested compression inside a compressed wrapper",
                            m.attr & ATTR_CODEC_MASK, count)
        off = add_wrap(base, m.offset) if w.magic > 0 else m.offset
        if count == 0:
            first_offset[0] = off
        if m.magic == 0:
            ts = -1
            ts_type = -1
        elif w.magic > 0 and (w.attr & ATTR_TIMESTAMP_TYPE):
            ts = w.timestamp                     # LogAppendTime: the broker's time on the wrapper
            ts_type = 1
        else:
            ts = m.timestamp
            ts_type = 0
        if off >= min_offset:
            if store_one(c, off, ts, ts_type, &m, origin, bias) < 0:
                return _set_err(err, E_NOMEM, "record arrays", count, -1)
        count += 1
        p += LOG_OVERHEAD + m.size
    return E_OK

# cython: language_level=3
"""The record batches of a Fetch response, checked and scanned while the response arrives.

Why: decoding a fetched partition (the CRC check and the validation of every record into
position arrays, kcore.records.decode_columnar) was the consumer thread's largest cost per
record after the record objects, and it ran long after the bytes had arrived, when they had
left the cache of the core that received them. A connection's receive thread
(kcore.receive_loop) feeds each Fetch response it receives to a FetchScan as its bytes come
in: the response's structure is parsed as far as the bytes go, and (when the owner asks for
it) each record batch is checked (CRC32C) and scanned (kcore.scan.scan_v2) as soon as it is
complete, without the GIL, while it is still in that core's cache and in parallel with the
application. Batches not scanned there are scanned by whoever decodes the partition.

Only what a plain decode would turn into the same arrays is scanned: complete, uncompressed
v2 data batches. Anything else in a partition's records (a compressed, control or legacy
batch, an empty batch, a bad CRC, a malformed record) marks that partition BLOB_FALLBACK, and
kcore.records.decode_columnar decodes it on the consumer's thread as before, raising the same
errors at the same moment. A response whose structure cannot be parsed stops being scanned;
the protocol decoder then reports it as it always did.

``ScannedFetch`` (made by the receive loop once the whole frame arrived) hands out each
partition's result as a ``ScannedRecords``, which ``decode_columnar(data, scanned=...)``
turns into a ColumnarBatch without decoding again.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.stdint cimport INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset
from cpython.unicode cimport PyUnicode_DecodeUTF8

from kcore.crc cimport crc32c_update
from kcore.layout cimport (ATTR_CODEC_MASK, ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, ENTRY_BASE_OFFSET,
                           ENTRY_LENGTH, ENTRY_MAGIC, LEGACY_MIN_SIZE, LOG_OVERHEAD, MIN_RECORD_BYTES,
                           V2_ATTRIBUTES, V2_BASE_TIMESTAMP, V2_CRC, V2_HEADER_SIZE, V2_LAST_OFFSET_DELTA,
                           V2_MAX_TIMESTAMP, V2_PARTITION_LEADER_EPOCH, V2_RECORD_COUNT)
from kcore.scan cimport E_OK, RecCols, ScanErr, V2Ctx, add_wrap, cols_release, cols_reserve, scan_v2
from kcore.wire cimport load_be16, load_be32, load_be64, read_uvarint32_ptr, uuid_from

__all__ = ["ScannedFetch", "ScannedRecords", "scan_fetch_response", "next_fetch_offset", "BLOB_STATES"]

BLOB_STATES = {BLOB_SCANNING: "scanning", BLOB_DONE: "done", BLOB_FALLBACK: "fallback", BLOB_TAKEN: "taken"}

# The Fetch versions whose layout is known here (the client asks for no others) and the first flexible one.
cdef enum:
    FETCH_MIN_VERSION = 4
    FETCH_MAX_VERSION = 18
    FETCH_FLEXIBLE = 12
    FETCH_TOPIC_IDS = 13

# Where the parse of the response's structure stands.
cdef enum:
    ST_HEADER = 0
    ST_TOPIC = 1
    ST_PART = 2
    ST_BLOB = 3
    ST_PART_TAIL = 4
    ST_TOPIC_TAIL = 5
    ST_DONE = 6
    ST_FAILED = 7

# What a field read found.
cdef enum:
    R_OK = 0
    R_MORE = 1          # the field goes on past the bytes received so far
    R_BAD = 2           # malformed: past the frame's end, a bad varint, a negative length


cdef FetchScan* fetchscan_new(int version, bint check_crcs) noexcept nogil:
    cdef FetchScan* s
    if version < FETCH_MIN_VERSION or version > FETCH_MAX_VERSION:
        return NULL
    s = <FetchScan*>calloc(1, sizeof(FetchScan))
    if s == NULL:
        return NULL
    s.version = version
    s.check_crcs = check_crcs
    s.stage = ST_HEADER
    return s


cdef void fetchscan_free(FetchScan* s) noexcept:
    cdef Py_ssize_t i
    if s == NULL:
        return
    for i in range(s.nblobs):
        cols_release(&s.blobs[i].cols)
    free(s.blobs)
    free(s.topics)
    free(s.parts)
    free(s)


# ---------------------------------------------------------------------------- field readers
# Each reads at p[0] within [.., avail) of a frame of `total` bytes and advances p[0] only on
# R_OK: a field cut off by `avail` is read again from its start when more bytes arrived.
cdef inline int _need(const uint8_t* p, Py_ssize_t n, const uint8_t* avail,
                      const uint8_t* total) noexcept nogil:
    if n > total - p:
        return R_BAD
    if n > avail - p:
        return R_MORE
    return R_OK


cdef inline int _uvarint(const uint8_t** pp, const uint8_t* avail, const uint8_t* total,
                         uint32_t* out) noexcept nogil:
    cdef int n = read_uvarint32_ptr(pp[0], avail, out)
    if n > 0:
        pp[0] += n
        return R_OK
    if avail - pp[0] >= 5 or avail >= total:
        return R_BAD        # five bytes were there (a bad varint), or the frame ended in it
    return R_MORE


cdef inline int _skip(const uint8_t** pp, Py_ssize_t n, const uint8_t* avail,
                      const uint8_t* total) noexcept nogil:
    cdef int rc = _need(pp[0], n, avail, total)
    if rc == R_OK:
        pp[0] += n
    return rc


cdef int _array_len(const uint8_t** pp, bint flexible, const uint8_t* avail, const uint8_t* total,
                    int64_t* out) noexcept nogil:
    """An array's element count (-1: null)."""
    cdef uint32_t u
    cdef int rc
    if flexible:
        rc = _uvarint(pp, avail, total, &u)
        if rc == R_OK:
            out[0] = <int64_t>u - 1
        return rc
    rc = _need(pp[0], 4, avail, total)
    if rc == R_OK:
        out[0] = <int32_t>load_be32(pp[0])
        pp[0] += 4
    return rc


cdef int _tagged(const uint8_t** pp, const uint8_t* avail, const uint8_t* total) noexcept nogil:
    """Skip a tagged-field section."""
    cdef const uint8_t* p = pp[0]
    cdef uint32_t count, tag, size
    cdef int rc = _uvarint(&p, avail, total, &count)
    if rc != R_OK:
        return rc
    while count > 0:
        rc = _uvarint(&p, avail, total, &tag)
        if rc == R_OK:
            rc = _uvarint(&p, avail, total, &size)
        if rc == R_OK:
            rc = _skip(&p, size, avail, total)
        if rc != R_OK:
            return rc
        count -= 1
    pp[0] = p
    return R_OK


# ---------------------------------------------------------------------------- structure
cdef int _entries(FetchScan* s, const uint8_t* frame, const uint8_t* p, bint flexible,
                  const uint8_t* avail, const uint8_t* total, uint32_t* left) noexcept nogil:
    """The length of the array of topics or partitions at ``p`` into ``left`` (a null one, -1,
    is not an answer a Fetch gives), and the scan's position past it."""
    cdef int64_t count
    cdef int rc = _array_len(&p, flexible, avail, total, &count)
    if rc != R_OK:
        return rc
    if count < 0:
        return R_BAD
    left[0] = <uint32_t>count
    s.pos = p - frame
    return R_OK


cdef int _header(FetchScan* s, const uint8_t* frame, const uint8_t* avail,
                 const uint8_t* total) noexcept nogil:
    """Response header and the fields before the topics; sets topics_left."""
    cdef const uint8_t* p = frame
    cdef bint flexible = s.version >= FETCH_FLEXIBLE
    cdef int rc = _skip(&p, 4, avail, total)            # correlation id
    if rc == R_OK and flexible:
        rc = _tagged(&p, avail, total)
    if rc == R_OK:
        # throttle time; error code and session id from v7
        rc = _need(p, 4 + (6 if s.version >= 7 else 0), avail, total)
    if rc != R_OK:
        return rc
    s.throttle_time_ms = <int32_t>load_be32(p)
    p += 4
    if s.version >= 7:
        s.error_code = <int16_t>load_be16(p)
        s.session_id = <int32_t>load_be32(p + 2)
        p += 6
    return _entries(s, frame, p, flexible, avail, total, &s.topics_left)


cdef bint _room(void** items, Py_ssize_t* cap, Py_ssize_t used, size_t size, Py_ssize_t first) noexcept nogil:
    """Room for one more item in a realloc'ed array (doubling, from ``first``); False when
    out of memory (the array is then unchanged)."""
    cdef Py_ssize_t grown_cap
    cdef void* grown
    if used < cap[0]:
        return True
    grown_cap = cap[0] * 2 if cap[0] else first
    grown = realloc(items[0], grown_cap * size)
    if grown == NULL:
        return False
    items[0] = grown
    cap[0] = grown_cap
    return True


cdef int _topic(FetchScan* s, const uint8_t* frame, const uint8_t* avail,
                const uint8_t* total) noexcept nogil:
    cdef const uint8_t* p = frame + s.pos
    cdef bint flexible = s.version >= FETCH_FLEXIBLE
    cdef int64_t count
    cdef uint32_t u
    cdef int rc
    cdef const uint8_t* name
    if s.version >= FETCH_TOPIC_IDS:
        name = p
        rc = _skip(&p, 16, avail, total)
    elif flexible:
        rc = _uvarint(&p, avail, total, &u)
        name = p
        if rc == R_OK:
            rc = R_BAD if u == 0 else _skip(&p, u - 1, avail, total)
    else:
        rc = _need(p, 2, avail, total)
        name = p + 2
        if rc == R_OK:
            count = <int16_t>load_be16(p)
            p += 2
            rc = R_BAD if count < 0 else _skip(&p, count, avail, total)
    if rc != R_OK:
        return rc
    rc = _entries(s, frame, p, flexible, avail, total, &s.parts_left)
    if rc != R_OK:
        return rc
    if not _room(<void**>&s.topics, &s.captopics, s.ntopics, sizeof(TopicHead), 4):
        return R_BAD
    s.topics[s.ntopics].name_start = name - frame
    s.topics[s.ntopics].name_len = p - name
    s.ntopics += 1
    return R_OK


cdef int _partition(FetchScan* s, const uint8_t* frame, const uint8_t* avail,
                    const uint8_t* total, int64_t* records_len) noexcept nogil:
    """A partition's fields up to its records' bytes; records_len -1 when null."""
    cdef const uint8_t* p = frame + s.pos
    cdef bint flexible = s.version >= FETCH_FLEXIBLE
    cdef int64_t count, k
    cdef uint32_t u
    cdef PartHead head
    # index, error code, high watermark, last stable offset (v4+), log start offset (v5+)
    cdef int rc = _need(p, 4 + 2 + 8 + 8 + (8 if s.version >= 5 else 0), avail, total)
    if rc != R_OK:
        return rc
    head.topic = s.ntopics - 1
    head.index = <int32_t>load_be32(p)
    head.error_code = <int16_t>load_be16(p + 4)
    head.high_watermark = <int64_t>load_be64(p + 6)
    head.last_stable_offset = <int64_t>load_be64(p + 14)
    head.log_start_offset = -1
    p += 22
    if s.version >= 5:
        head.log_start_offset = <int64_t>load_be64(p)
        p += 8
    head.read_replica = -1
    head.blob = -1
    head.tagged = False
    rc = _array_len(&p, flexible, avail, total, &count)     # aborted transactions
    if rc != R_OK:
        return rc
    head.aborted = count
    k = 0
    while k < count:
        rc = _skip(&p, 16, avail, total)        # producer id, first offset
        if rc == R_OK and flexible:
            rc = _tagged(&p, avail, total)
        if rc != R_OK:
            return rc
        k += 1
    if s.version >= 11:
        rc = _need(p, 4, avail, total)          # preferred read replica
        if rc != R_OK:
            return rc
        head.read_replica = <int32_t>load_be32(p)
        p += 4
    if flexible:
        rc = _uvarint(&p, avail, total, &u)
        if rc != R_OK:
            return rc
        records_len[0] = <int64_t>u - 1
    else:
        rc = _need(p, 4, avail, total)
        if rc != R_OK:
            return rc
        records_len[0] = <int32_t>load_be32(p)
        p += 4
    if records_len[0] < -1 or records_len[0] > total - p:
        return R_BAD
    if not _room(<void**>&s.parts, &s.capparts, s.nparts, sizeof(PartHead), 8):
        return R_BAD
    s.parts[s.nparts] = head
    s.nparts += 1
    s.pos = p - frame
    return R_OK


cdef BlobScan* _new_blob(FetchScan* s, Py_ssize_t start, Py_ssize_t length) noexcept nogil:
    cdef BlobScan* b
    if not _room(<void**>&s.blobs, &s.capblobs, s.nblobs, sizeof(BlobScan), 8):
        return NULL
    b = &s.blobs[s.nblobs]
    memset(b, 0, sizeof(BlobScan))
    b.start = start
    b.length = length
    b.state = BLOB_SCANNING
    b.next_offset = -1
    b.min_offset = INT64_MAX
    b.incomplete = -1
    s.nblobs += 1
    return b


# ---------------------------------------------------------------------------- batches
cdef Py_ssize_t blobscan_step(BlobScan* b, const uint8_t* data, Py_ssize_t have, bint check_crcs,
                              Py_ssize_t budget) noexcept nogil:
    """Check and scan the batches of b that are complete within data[:have] (data: the
    records bytes), as kcore.records' decoder walks them, falling back where it would do
    anything but scan a plain batch; stop after a batch once `budget` bytes were scanned.
    Returns the bytes of the batches scanned."""
    cdef Py_ssize_t done = 0
    cdef const uint8_t* p
    cdef Py_ssize_t remaining, total, first, i
    cdef int32_t length, count
    cdef int attrs
    cdef int64_t base_offset, last_offset, low
    cdef V2Ctx ctx
    cdef ScanErr err
    cdef RecCols* c = &b.cols
    while b.state == BLOB_SCANNING:
        if done >= budget:
            return done
        remaining = b.length - b.pos
        if remaining == 0:
            b.state = BLOB_DONE
            return done
        if remaining < LOG_OVERHEAD:
            if have < b.length:
                return done
            b.partial = remaining
            b.state = BLOB_DONE
            return done
        if have - b.pos < LOG_OVERHEAD:
            return done
        p = data + b.pos
        length = <int32_t>load_be32(p + ENTRY_LENGTH)
        if length < LEGACY_MIN_SIZE:
            b.state = BLOB_FALLBACK
            return done
        total = <Py_ssize_t>length + LOG_OVERHEAD
        if total > remaining:
            b.partial = remaining           # cut off at the fetch size: not an error
            b.incomplete = total
            b.state = BLOB_DONE
            return done
        if have - b.pos < total:
            return done                     # the rest of this batch is still on its way
        if (total < V2_HEADER_SIZE or p[ENTRY_MAGIC] != 2):
            b.state = BLOB_FALLBACK
            return done
        if check_crcs and crc32c_update(0, p + V2_ATTRIBUTES, <size_t>(total - V2_ATTRIBUTES)) \
                != load_be32(p + V2_CRC):
            b.state = BLOB_FALLBACK
            return done
        attrs = load_be16(p + V2_ATTRIBUTES)
        count = <int32_t>load_be32(p + V2_RECORD_COUNT)
        if (attrs & (ATTR_CODEC_MASK | ATTR_CONTROL)) or count <= 0:
            b.state = BLOB_FALLBACK
            return done
        base_offset = <int64_t>load_be64(p)
        last_offset = add_wrap(base_offset, <int32_t>load_be32(p + V2_LAST_OFFSET_DELTA))
        if c.cap == 0:
            # Sized once for the whole field, from this batch's bytes per record.
            if cols_reserve(c, <Py_ssize_t>((<double>b.length / total) * count) + 16) < 0:
                b.state = BLOB_FALLBACK
                return done
        ctx.base_offset = base_offset
        ctx.base_ts = <int64_t>load_be64(p + V2_BASE_TIMESTAMP)
        ctx.max_ts = <int64_t>load_be64(p + V2_MAX_TIMESTAMP)
        ctx.log_append = (attrs & ATTR_TIMESTAMP_TYPE) != 0
        ctx.ts_type = <int8_t>ctx.log_append
        ctx.min_offset = -INT64_MAX - 1      # every record: the fetch offset is checked later
        first = c.n
        if scan_v2(p + V2_HEADER_SIZE, <size_t>(total - V2_HEADER_SIZE), count, &ctx, data, 0,
                   c, &err) != E_OK:
            b.state = BLOB_FALLBACK
            return done
        low = last_offset
        for i in range(first, c.n):
            if c.offset[i] < low:
                low = c.offset[i]
        if low < b.min_offset:
            b.min_offset = low
        b.next_offset = add_wrap(last_offset, 1)
        b.pos += total
        done += total
    return done


cdef Py_ssize_t fetchscan_feed(FetchScan* s, const uint8_t* frame, Py_ssize_t avail,
                               Py_ssize_t total, Py_ssize_t budget) noexcept nogil:
    cdef Py_ssize_t done = 0
    cdef const uint8_t* end = frame + avail
    cdef const uint8_t* stop = frame + total
    cdef const uint8_t* p
    cdef int64_t records_len
    cdef BlobScan* b
    cdef Py_ssize_t have
    cdef int rc = R_OK
    if avail > total:
        s.stage = ST_FAILED
        return 0
    while True:
        if s.stage == ST_HEADER:
            rc = _header(s, frame, end, stop)
            if rc == R_OK:
                s.stage = ST_TOPIC
        elif s.stage == ST_TOPIC:
            if s.topics_left == 0:
                s.stage = ST_DONE
                continue
            rc = _topic(s, frame, end, stop)
            if rc == R_OK:
                s.stage = ST_PART
        elif s.stage == ST_PART:
            if s.parts_left == 0:
                s.stage = ST_TOPIC_TAIL
                continue
            rc = _partition(s, frame, end, stop, &records_len)
            if rc == R_OK:
                if records_len < 0:
                    s.stage = ST_PART_TAIL
                elif _new_blob(s, s.pos, <Py_ssize_t>records_len) == NULL:
                    rc = R_BAD
                else:
                    s.parts[s.nparts - 1].blob = s.nblobs - 1
                    s.stage = ST_BLOB
        elif s.stage == ST_BLOB:
            b = &s.blobs[s.nblobs - 1]
            have = avail - b.start
            if have > b.length:
                have = b.length
            if budget > 0:
                done += blobscan_step(b, frame + b.start, have, s.check_crcs, budget - done)
                if b.state == BLOB_SCANNING:
                    return done             # out of budget, or the rest is on its way
            elif have < b.length:
                return done
            # budget 0: only the structure; the batches left are scanned by whoever takes them
            s.pos = b.start + b.length
            s.stage = ST_PART_TAIL
        elif s.stage == ST_PART_TAIL or s.stage == ST_TOPIC_TAIL:
            if s.version >= FETCH_FLEXIBLE:
                p = frame + s.pos
                rc = _tagged(&p, end, stop)
                if rc == R_OK:
                    if s.stage == ST_PART_TAIL and p - frame - s.pos != 1:
                        s.parts[s.nparts - 1].tagged = True     # more than a zero count
                    s.pos = p - frame
            if rc == R_OK:
                if s.stage == ST_PART_TAIL:
                    s.parts_left -= 1
                    s.stage = ST_PART
                else:
                    s.topics_left -= 1
                    s.stage = ST_TOPIC
        else:
            return done     # ST_DONE, ST_FAILED
        if rc == R_MORE:
            return done
        if rc == R_BAD:
            s.stage = ST_FAILED
            return done


# ---------------------------------------------------------------------------- Python side
cdef object scanned_fetch(FetchScan* s, const uint8_t* base, Py_ssize_t length):
    cdef ScannedFetch f
    try:
        f = ScannedFetch.__new__(ScannedFetch)
    except BaseException:
        fetchscan_free(s)
        raise
    f.scan = s
    f.base = base
    f.length = length
    return f


@cython.final
cdef class ScannedRecords:
    """One partition's records as the receive thread scanned them (kcore.records.
    decode_columnar(data, scanned=...) makes its ColumnarBatch from them)."""

    def __dealloc__(self):
        cols_release(&self.blob.cols)

    @property
    def state(self):
        """'done' (usable instead of a decode), 'scanning' (batches left to scan, which
        decode_columnar does before using it) or 'fallback' (decode as usual)."""
        return BLOB_STATES[self.blob.state]

    @property
    def num_records(self):
        """Records scanned so far."""
        return self.blob.cols.n

    @property
    def scanned_bytes(self):
        """Bytes of the batches scanned so far."""
        return self.blob.pos

    def __repr__(self):
        return (f"<kcore.fetchscan.ScannedRecords {self.state}, {self.blob.cols.n} records, "
                f"{self.blob.length} bytes>")


@cython.final
cdef class ScannedFetch:
    """The scan of one received Fetch response frame: ``records_for(view)`` hands out the
    scan of the partition whose records bytes ``view`` is (a slice of that frame), once.
    Batches that arrived last may not have been scanned yet (the receive thread gives
    receiving priority): kcore.records.decode_columnar scans them, without the GIL."""

    def __dealloc__(self):
        fetchscan_free(self.scan)
        self.scan = NULL

    @property
    def complete(self):
        """Whether the whole structure was parsed (every partition's records were reached)."""
        return self.scan != NULL and self.scan.stage == ST_DONE

    def __len__(self):
        return self.scan.nblobs if self.scan != NULL else 0

    @property
    def array_bytes(self):
        """Bytes of the position arrays the scan holds (not yet handed out): memory that
        lives as long as the buffered answer, as the frame's own bytes do."""
        return self._array_bytes()

    cdef Py_ssize_t _array_bytes(self) noexcept:
        cdef Py_ssize_t i, total = 0
        cdef RecCols* c
        if self.scan == NULL:
            return 0
        for i in range(self.scan.nblobs):
            c = &self.scan.blobs[i].cols
            # offset, timestamp, key and value positions: 8 bytes each; lengths and header
            # starts 4; the timestamp type 1; per header 24
            total += c.cap * 45 + 4 + c.caph * 24
        return total

    cdef ScannedRecords _take(self, BlobScan* b):
        cdef ScannedRecords out = ScannedRecords.__new__(ScannedRecords)
        out.blob = b[0]
        out.check_crcs = self.scan.check_crcs
        out.addr = self.base + b.start
        memset(&b.cols, 0, sizeof(RecCols))
        b.state = BLOB_TAKEN
        return out

    def answer(self, frame, bint scans=True):
        """The whole answer from the scan, when it needs nothing the scan does not keep:
        ``(throttle_time_ms, error_code, session_id, array_bytes, partitions)`` with a tuple
        ``(topic, partition, error_code, high_watermark, last_stable_offset,
        log_start_offset, preferred_read_replica, records, scanned)`` per partition in the
        frame's order (``topic``: the name, or from v13 the id as a uuid.UUID; ``records``:
        a memoryview slice of ``frame`` or None; ``scanned``: its ScannedRecords, handed
        out here, or None, always None without ``scans``; ``array_bytes`` as before they were
        handed out, 0 without ``scans``). None (and
        nothing handed out) when the protocol decoder must read the answer: its structure
        was not wholly parsed or something follows it, ``frame`` is not the frame scanned, a
        partition lists aborted transactions or has tagged fields (a diverging epoch, a
        current leader, a snapshot id), the answer has top-level tagged fields (node
        endpoints), or a topic name is not UTF-8."""
        cdef Py_buffer buf
        cdef FetchScan* s = self.scan
        cdef Py_ssize_t i, end
        cdef bint same
        cdef PartHead* h
        cdef TopicHead* t
        cdef BlobScan* b
        cdef list topics, parts
        if s == NULL or s.stage != ST_DONE:
            return None
        PyObject_GetBuffer(frame, &buf, PyBUF_SIMPLE)
        same = <const uint8_t*>buf.buf == self.base and buf.len == self.length
        PyBuffer_Release(&buf)
        if not same:
            return None
        end = s.pos + (1 if s.version >= FETCH_FLEXIBLE else 0)
        if end != self.length or (s.version >= FETCH_FLEXIBLE and self.base[s.pos] != 0):
            return None
        for i in range(s.nparts):
            h = &s.parts[i]
            if h.tagged or h.aborted > 0 or h.aborted < -1 or (h.blob >= 0 and s.blobs[h.blob].state == BLOB_TAKEN):
                return None
        topics = []
        for i in range(s.ntopics):
            t = &s.topics[i]
            if s.version >= FETCH_TOPIC_IDS:
                topics.append(uuid_from(self.base + t.name_start))
            else:
                try:
                    topics.append(PyUnicode_DecodeUTF8(<const char*>(self.base + t.name_start),
                                                       t.name_len, NULL))
                except UnicodeDecodeError:
                    return None
        array_bytes = self._array_bytes() if scans else 0
        view = memoryview(frame)
        parts = []
        for i in range(s.nparts):
            h = &s.parts[i]
            if h.blob >= 0:
                b = &s.blobs[h.blob]
                records = view[b.start:b.start + b.length]
                scanned = self._take(b) if scans else None
            else:
                records = scanned = None
            parts.append((topics[h.topic], h.index, h.error_code, h.high_watermark,
                          h.last_stable_offset, h.log_start_offset, h.read_replica, records, scanned))
        return s.throttle_time_ms, s.error_code, s.session_id, array_bytes, parts

    def records_for(self, view):
        """The ScannedRecords of ``view`` (a partition's records field, as the protocol
        decoder sliced it from this frame), or None if it was not scanned (or was taken)."""
        cdef Py_buffer buf
        cdef Py_ssize_t i, n, off
        cdef BlobScan* b
        cdef ScannedRecords out
        if self.scan == NULL or view is None:
            return None
        PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE)
        try:
            off = <const uint8_t*>buf.buf - self.base
            if off < 0 or off > self.length:
                return None
            n = self.scan.nblobs
            # Partitions are read in the frame's order: start at the one after the last taken.
            for i in range(n):
                b = &self.scan.blobs[(self.next_blob + i) % n]
                if b.start == off and b.length == buf.len and b.state != BLOB_TAKEN:
                    out = self._take(b)
                    self.next_blob = (self.next_blob + i + 1) % n
                    return out
            return None
        finally:
            PyBuffer_Release(&buf)


def scan_fetch_response(frame, int version, bint check_crcs=True, Py_ssize_t chunk=0,
                        Py_ssize_t budget=-1):
    """Scan a whole Fetch response frame (without its size prefix) as the receive thread
    does, fed ``chunk`` bytes at a time (0: all at once), scanning up to ``budget`` bytes of
    batches after each chunk (-1: all; 0: none) and parsing the rest of the structure at the
    end: for tests and tools. The frame must stay alive and unchanged while the result is used."""
    cdef Py_buffer buf
    cdef FetchScan* s = fetchscan_new(version, check_crcs)
    cdef Py_ssize_t fed
    if s == NULL:
        raise ValueError(f"no scan of Fetch v{version} (kcore.fetchscan reads v{FETCH_MIN_VERSION}"
                         f"-v{FETCH_MAX_VERSION})")
    PyObject_GetBuffer(frame, &buf, PyBUF_SIMPLE)
    try:
        if chunk <= 0:
            chunk = buf.len if buf.len > 0 else 1
        fed = 0
        while True:
            fed = fed + chunk if buf.len - fed > chunk else buf.len
            with nogil:
                if budget != 0:
                    fetchscan_feed(s, <const uint8_t*>buf.buf, fed, buf.len,
                                   PY_SSIZE_T_MAX if budget < 0 else budget)
                if fed >= buf.len:
                    fetchscan_feed(s, <const uint8_t*>buf.buf, fed, buf.len, 0)
            if fed >= buf.len:
                break
        return scanned_fetch(s, <const uint8_t*>buf.buf, buf.len)
    finally:
        PyBuffer_Release(&buf)


def next_fetch_offset(data, int64_t fetch_offset):
    """(offset after the last complete batch in ``data``, that batch's partition leader epoch
    or -1) from the entries' headers only: base offset, length, magic, and for v2 the leader
    epoch and last offset delta; a legacy entry is one message at its own offset, epoch -1.
    ``fetch_offset`` and -1 if no complete entry ends past ``fetch_offset``. The walk stops at
    an entry too short to be one, one running past the end, or one whose last offset (or the
    offset after it) would pass 2**63 - 1: none that a broker sends. Called for every
    partition of every Fetch answer, where the walk in Python took microseconds."""
    cdef Py_buffer buf
    cdef const uint8_t* p
    cdef Py_ssize_t n
    cdef int64_t nxt
    cdef int32_t epoch
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>buf.buf
        n = buf.len
        with nogil:
            nxt, epoch = _walk_entries(p, n, fetch_offset)
    finally:
        PyBuffer_Release(&buf)
    return nxt, epoch


cdef (int64_t, int32_t) _walk_entries(const uint8_t* p, Py_ssize_t n, int64_t fetch_offset) noexcept nogil:
    """next_fetch_offset's walk, without the GIL."""
    cdef Py_ssize_t pos = 0
    cdef int64_t nxt = fetch_offset, base, last
    cdef int64_t length
    cdef int32_t delta, epoch = -1, batch_epoch
    while n - pos >= V2_LAST_OFFSET_DELTA + 4:
        base = <int64_t>load_be64(p + pos + ENTRY_BASE_OFFSET)
        length = <int32_t>load_be32(p + pos + ENTRY_LENGTH)
        if length < LEGACY_MIN_SIZE or length > n - pos - LOG_OVERHEAD:
            break
        if p[pos + ENTRY_MAGIC] == 2:
            delta = <int32_t>load_be32(p + pos + V2_LAST_OFFSET_DELTA)
            if delta > 0 and base > INT64_MAX - delta:
                break
            last = base + delta
            batch_epoch = <int32_t>load_be32(p + pos + V2_PARTITION_LEADER_EPOCH)
        else:
            last = base
            batch_epoch = -1
        if last >= nxt:
            if last == INT64_MAX:
                break
            nxt = last + 1
            epoch = batch_epoch
        pos += LOG_OVERHEAD + length
    return nxt, epoch

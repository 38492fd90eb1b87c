# cimport interface of kcore.fetchscan: the record batches of a Fetch response validated into
# position arrays while the response is still being received (see fetchscan.pyx).
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from kcore.scan cimport RecCols

cdef enum:
    BLOB_SCANNING = 0       # batches still arriving
    BLOB_DONE = 1           # every batch checked and scanned: usable instead of a decode
    BLOB_FALLBACK = 2       # something a plain decode must handle (or report) itself
    BLOB_TAKEN = 3          # handed out (ScannedFetch.records_for)


# One partition's records field: where it is in the frame and what its batches gave.
cdef struct BlobScan:
    Py_ssize_t start                # offset of the records bytes in the frame
    Py_ssize_t length
    Py_ssize_t pos                  # next batch, from start
    int state
    RecCols cols
    int64_t next_offset             # after the last complete batch (-1: none)
    int64_t min_offset              # lowest record offset, lowest last offset of a batch
    Py_ssize_t partial              # bytes of a trailing batch cut off by the fetch size
    Py_ssize_t incomplete           # that batch's whole size when its header was there, else -1


# One topic of the answer: where its name (or, from v13, its 16-byte id) is in the frame.
cdef struct TopicHead:
    Py_ssize_t name_start
    Py_ssize_t name_len


# One partition of the answer: its fields up to the records, and what follows them.
cdef struct PartHead:
    Py_ssize_t topic                # index into FetchScan.topics
    int32_t index
    int16_t error_code
    int64_t high_watermark
    int64_t last_stable_offset
    int64_t log_start_offset        # -1 before v5
    int64_t aborted                 # aborted transactions listed (-1: null)
    int32_t read_replica            # preferred read replica (-1 before v11)
    Py_ssize_t blob                 # index into FetchScan.blobs (-1: null records)
    bint tagged                     # its tagged fields are not empty (diverging epoch, leader...)


# A Fetch response of one version being scanned as its bytes arrive.
cdef struct FetchScan:
    int version
    bint check_crcs
    int stage
    Py_ssize_t pos                  # first byte of the frame not yet parsed
    uint32_t topics_left
    uint32_t parts_left
    BlobScan* blobs
    Py_ssize_t nblobs
    Py_ssize_t capblobs
    # The top-level fields (0 where the version has none) and every topic and partition head.
    int32_t throttle_time_ms
    int16_t error_code
    int32_t session_id
    TopicHead* topics
    Py_ssize_t ntopics
    Py_ssize_t captopics
    PartHead* parts
    Py_ssize_t nparts
    Py_ssize_t capparts


# Without the GIL: a scan of a Fetch response of `version` (NULL when out of memory).
cdef FetchScan* fetchscan_new(int version, bint check_crcs) noexcept nogil
# Without the GIL: parse frame[pos:avail] (`total`: the whole frame's length) and scan its
# complete batches, stopping after a batch once `budget` bytes were scanned (0: parse only,
# leaving the batches not yet scanned); returns the bytes of batches scanned. Called again as
# more bytes arrive; never reads at or past `avail`.
cdef Py_ssize_t fetchscan_feed(FetchScan* s, const uint8_t* frame, Py_ssize_t avail,
                               Py_ssize_t total, Py_ssize_t budget) noexcept nogil
# Without the GIL: scan b's batches complete within data[:have] (data: its records bytes),
# up to about `budget` bytes; returns the bytes scanned.
cdef Py_ssize_t blobscan_step(BlobScan* b, const uint8_t* data, Py_ssize_t have, bint check_crcs,
                              Py_ssize_t budget) noexcept nogil
# With the GIL: free the scan and every array it still owns.
cdef void fetchscan_free(FetchScan* s) noexcept
# With the GIL: the scan as a Python object (owning it), for the frame at `base`.
cdef object scanned_fetch(FetchScan* s, const uint8_t* base, Py_ssize_t length)


cdef class ScannedRecords:
    cdef BlobScan blob
    cdef bint check_crcs
    cdef const uint8_t* addr        # where the records bytes were (the frame keeps them)


cdef class ScannedFetch:
    cdef FetchScan* scan
    cdef const uint8_t* base
    cdef Py_ssize_t length
    cdef Py_ssize_t next_blob
    cdef Py_ssize_t _array_bytes(self) noexcept
    cdef ScannedRecords _take(self, BlobScan* b)

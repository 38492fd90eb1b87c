# cython: language_level=3
"""C-level interface of kcore.receive_loop: a connection's frames received on a thread of
its own (see receive_loop.pyx)."""
from libc.stdint cimport int32_t, int64_t
from kcore.fetchscan cimport FetchScan
from kcore.posixsys cimport pthread_mutex_t
from kcore.transport cimport tp_conn

cdef enum:
    _STASH = 2          # pooled blocks waiting for the loop's next large frames
    _EXPECT = 16        # Fetch responses announced for scanning (expect_fetch), at most
    SCAN_SLICE = 262144 # bytes of batches scanned between two looks at the socket


# One received frame, queued for the owner.
cdef struct FrameNode:
    char* ptr
    Py_ssize_t length
    size_t cap          # bytes allocated at ptr
    bint large          # handed out as a Frame (else copied into bytes)
    FetchScan* scan     # its record batches, scanned as it arrived (a Fetch response), or NULL
    FrameNode* next


cdef class ReceiveLoop:
    cdef readonly int fd
    cdef readonly Py_ssize_t max_frame_bytes
    cdef readonly Py_ssize_t buffer_size
    cdef tp_conn _conn              # the socket (the owner's: the loop only reads it)
    cdef int _pid                   # the process that made the loop (the only one that runs it)
    cdef Py_ssize_t _direct_min
    cdef int _wake[2]               # loop -> owner: readable while frames or an error wait
    cdef int _stop[2]               # owner -> loop: stop
    cdef pthread_mutex_t _mu        # guards everything below up to _nstash
    cdef bint _mu_ready
    cdef FrameNode* _head
    cdef FrameNode* _tail
    cdef bint _signaled             # a byte is (or is about to be) in the wake pipe
    cdef bint _stopping
    cdef bint _running
    cdef bint _ended                # run() returned (or was never allowed to start again)
    cdef int _err_kind
    cdef int64_t _err_a
    cdef int64_t _err_b
    cdef long long _received
    cdef void* _stash_ptr[_STASH]
    cdef size_t _stash_size[_STASH]
    cdef int _nstash
    cdef int32_t _exp_corr[_EXPECT]  # announced Fetch responses: correlation id, version, CRC check
    cdef int _exp_version[_EXPECT]
    cdef bint _exp_crcs[_EXPECT]
    cdef bint _exp_batches[_EXPECT]
    cdef int _nexp
    # loop-thread state (touched only by run(), or by the owner once run() returned)
    cdef char* _buf
    cdef Py_ssize_t _start
    cdef Py_ssize_t _end
    cdef char* _cur                 # large frame being received in place
    cdef Py_ssize_t _cur_len
    cdef Py_ssize_t _cur_fill
    cdef size_t _cur_cap
    cdef Py_ssize_t _uncounted      # bytes read, added to _received at the next lock (_push, the loop's top, or run())
    cdef FetchScan* _scan           # the large frame's scan, if it is an announced Fetch response
    cdef bint _scan_looked          # the large frame's correlation id was looked up
    cdef bint _scan_batches         # ... and its batches are scanned here as they arrive
    # owner state
    cdef dict _scanned              # correlation id -> kcore.fetchscan.ScannedFetch, until taken

    cdef void _release(self) noexcept
    cdef void _wake_owner(self) noexcept nogil
    cdef void _fail(self, int kind, int64_t a, int64_t b) noexcept nogil
    cdef bint _push(self, FrameNode* first, FrameNode* last) noexcept nogil
    cdef char* _block(self, Py_ssize_t length, size_t* cap) noexcept nogil
    cdef FrameNode* _node(self, char* ptr, Py_ssize_t length, size_t cap, bint large) noexcept nogil
    cdef int _split(self, FrameNode** first, FrameNode** last) noexcept nogil
    cdef void _scan_lookup(self) noexcept nogil
    cdef void _loop(self) noexcept nogil
    cdef int _check_process(self) except -1
    cdef _keep_scanned(self, int32_t corr, object scanned)
    cdef object _end_error(self, int kind, int64_t a, int64_t b)

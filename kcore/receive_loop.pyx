# cython: language_level=3
"""Receiving a connection's frames on a thread of its own, without the GIL.

Why: on the consumer's thread, every receive window of a Fetch response is a system call
whose kernel work (the copy, the window update, and over loopback the broker's next segments
pushed through the network stack in the receiver's context) is a fifth of the per-record
path's time; and while the application holds the GIL between polls, the socket fills up and
the broker waits. A ReceiveLoop drains the socket as data arrives, in parallel with the
application: ``run()`` (called on a dedicated thread) reads and frames without ever taking
the GIL (its reads, waits and size-prefix checks are kcore.transport's), and the consumer's
thread collects whole frames with ``take()``.

Protocol with the owner (the network client, on its own thread):
  - ``wake_fd`` becomes readable when frames (or an error) wait: register it in the selector;
  - ``take()`` returns the frames completed so far, in order: small ones as ``bytes``, large
    ones (``>= buffer_size // 2``) as kcore.frames.Frame over the block they were received
    into; once every frame was taken, the error that ended the loop is raised
    (KafkaConnectionError at end of stream, InvalidLengthError / FrameTooLargeError for a bad
    size prefix, OSError for a socket error);
  - ``stop()`` makes ``run()`` return (it waits in poll() on a stop pipe too); join the
    thread, then close the socket. The socket must be non-blocking and stays open while the
    loop runs (the owner keeps sending on it).
Large frames are received into blocks of kcore.pool handed to the loop by ``take()`` (the
blocks of frames already released), so a steady stream of responses reuses memory instead of
faulting in fresh pages on the receiving thread.

Fetch responses announced with ``expect_fetch(correlation_id, version, check_crcs)`` (before
the request is sent) are scanned as they arrive when they are large frames: kcore.fetchscan
checks and scans each record batch as soon as it is complete, on this thread and while its
bytes are in this core's cache; ``take_scanned(correlation_id)`` then hands the result over
(a kcore.fetchscan.ScannedFetch), once the frame itself was taken.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove

from kcore.fetchscan cimport FetchScan, fetchscan_feed, fetchscan_free, fetchscan_new, scanned_fetch
from kcore.frames cimport check_receive_sizes, frame_over
from kcore.pool cimport pool_alloc, pool_block_fits, pool_give, pool_size_class, pool_take_pooled
from posix.unistd cimport getpid

from kcore.posixsys cimport (close, errno, pthread_mutex_destroy, pthread_mutex_init, pthread_mutex_lock,
                             pthread_mutex_unlock, read, write)
from kcore.transport cimport (TP_AGAIN, TP_IO, TP_OK, TP_WOKEN, frame_size_error,
                              tp_attach, tp_frame_size, tp_pipe, tp_recv, tp_wait)
from kcore.wire cimport load_be32

import os

from kcore.errors import KafkaConnectionError

__all__ = ["ReceiveLoop", "STASH_BLOCKS"]

STASH_BLOCKS = _STASH

# Why the loop ended (err_kind).
cdef enum:
    E_NONE = 0
    E_EOF = 1           # end of stream; err_a, err_b: bytes of a frame received, its size
    E_FRAME_SIZE = 2    # a size prefix refused: err_a the transport's result, err_b the length
    E_ERRNO = 4         # recv()/poll() failed with errno err_a
    E_NOMEM = 5         # no memory for a frame of err_a bytes


cdef int _pipe_nonblocking(int* fds) except -1:
    if tp_pipe(fds) != 0:
        raise OSError(errno, os.strerror(errno))
    return 0


@cython.final
cdef class ReceiveLoop:
    """Frames of one socket, received on the thread that calls ``run()`` (module docstring)."""

    def __cinit__(self, int fd, Py_ssize_t max_frame_bytes=104857600, Py_ssize_t buffer_size=65536):
        self._wake[0] = self._wake[1] = self._stop[0] = self._stop[1] = -1
        self._scanned = {}
        if fd < 0:
            raise ValueError(f"fd must be a file descriptor, got {fd}")
        check_receive_sizes(max_frame_bytes, buffer_size)
        self.fd = fd
        tp_attach(&self._conn, fd)
        self._pid = getpid()
        self.max_frame_bytes = max_frame_bytes
        self.buffer_size = buffer_size
        self._direct_min = buffer_size // 2
        self._buf = <char*>malloc(buffer_size)
        if self._buf == NULL:
            raise MemoryError()
        _pipe_nonblocking(self._wake)
        _pipe_nonblocking(self._stop)
        pthread_mutex_init(&self._mu, NULL)
        self._mu_ready = True

    def __dealloc__(self):
        # Only reached when no thread runs run() any more: run() holds a reference to self
        # (in a forked child the thread is gone, and the mutex may have been copied locked).
        self._release()
        if self._mu_ready and getpid() == self._pid:
            pthread_mutex_destroy(&self._mu)
        self._mu_ready = False

    cdef void _release(self) noexcept:
        """Free every buffer and close the pipes (after run() returned)."""
        cdef FrameNode* n
        cdef int i
        while self._head != NULL:
            n = self._head
            self._head = n.next
            fetchscan_free(n.scan)
            free(n.ptr)
            free(n)
        self._tail = NULL
        fetchscan_free(self._scan)
        self._scan = NULL
        for i in range(self._nstash):
            free(self._stash_ptr[i])
        self._nstash = 0
        free(self._cur)
        self._cur = NULL
        free(self._buf)
        self._buf = NULL
        for i in range(2):
            if self._wake[i] >= 0:
                close(self._wake[i])
                self._wake[i] = -1
            if self._stop[i] >= 0:
                close(self._stop[i])
                self._stop[i] = -1

    @property
    def wake_fd(self):
        """Readable while frames or the loop's end wait to be taken."""
        return self._wake[0]

    @property
    def received_bytes(self):
        """Every byte read from the socket so far."""
        cdef long long n
        self._check_process()
        pthread_mutex_lock(&self._mu)
        n = self._received
        pthread_mutex_unlock(&self._mu)
        return n

    @property
    def stashed(self):
        """Sizes of the pooled blocks waiting for the loop's next large frames, oldest first."""
        cdef size_t sizes[_STASH]
        cdef int i, n
        self._check_process()
        pthread_mutex_lock(&self._mu)
        n = self._nstash
        for i in range(n):
            sizes[i] = self._stash_size[i]
        pthread_mutex_unlock(&self._mu)
        return tuple([sizes[i] for i in range(n)])

    @property
    def running(self):
        return self._running and getpid() == self._pid

    # ------------------------------------------------------------------ the loop thread
    def run(self):
        """Receive until stop(), end of stream or an error; call on a dedicated thread."""
        if self._buf == NULL:
            raise RuntimeError("the receive loop was closed")
        self._check_process()
        pthread_mutex_lock(&self._mu)
        if self._running or self._ended:
            pthread_mutex_unlock(&self._mu)
            raise RuntimeError("a receive loop runs once")
        self._running = True
        pthread_mutex_unlock(&self._mu)
        with nogil:
            self._loop()
            pthread_mutex_lock(&self._mu)
            self._received += self._uncounted   # the last read, if an error ended the loop
            self._uncounted = 0
            self._running = False
            self._ended = True
            self._signaled = True
            pthread_mutex_unlock(&self._mu)
            self._wake_owner()

    cdef void _wake_owner(self) noexcept nogil:
        """Make wake_fd readable."""
        cdef char one = 1
        write(self._wake[1], &one, 1)   # a full pipe is as good as a byte more

    cdef void _fail(self, int kind, int64_t a, int64_t b) noexcept nogil:
        pthread_mutex_lock(&self._mu)
        if self._err_kind == E_NONE:
            self._err_kind = kind
            self._err_a = a
            self._err_b = b
        pthread_mutex_unlock(&self._mu)

    cdef bint _push(self, FrameNode* first, FrameNode* last) noexcept nogil:
        """Queue a chain of frames; True if the owner must be woken. The bytes of the read
        that completed them are counted under the same lock: an owner that has taken every
        frame of a stream then reads received_bytes as the stream's length."""
        cdef bint need
        pthread_mutex_lock(&self._mu)
        self._received += self._uncounted
        self._uncounted = 0
        if self._tail == NULL:
            self._head = first
        else:
            self._tail.next = first
        self._tail = last
        need = not self._signaled
        self._signaled = True
        pthread_mutex_unlock(&self._mu)
        return need

    cdef char* _block(self, Py_ssize_t length, size_t* cap) noexcept nogil:
        """Memory for a large frame: the smallest stashed block that fits, else malloc."""
        cdef int i, best = -1
        cdef size_t need = <size_t>length
        cdef char* p
        pthread_mutex_lock(&self._mu)
        for i in range(self._nstash):
            if pool_block_fits(need, self._stash_size[i]):
                if best < 0 or self._stash_size[i] < self._stash_size[best]:
                    best = i
        if best >= 0:
            p = <char*>self._stash_ptr[best]
            cap[0] = self._stash_size[best]
            self._nstash -= 1               # the others keep their order, oldest first
            memmove(&self._stash_ptr[best], &self._stash_ptr[best + 1],
                    (self._nstash - best) * sizeof(void*))
            memmove(&self._stash_size[best], &self._stash_size[best + 1],
                    (self._nstash - best) * sizeof(size_t))
            pthread_mutex_unlock(&self._mu)
            return p
        pthread_mutex_unlock(&self._mu)
        cap[0] = pool_size_class(need)
        return <char*>pool_alloc(cap[0])

    cdef FrameNode* _node(self, char* ptr, Py_ssize_t length, size_t cap, bint large) noexcept nogil:
        cdef FrameNode* n = <FrameNode*>malloc(sizeof(FrameNode))
        if n == NULL:
            return NULL
        n.ptr = ptr
        n.length = length
        n.cap = cap
        n.large = large
        n.scan = NULL
        n.next = NULL
        return n

    cdef int _split(self, FrameNode** first, FrameNode** last) noexcept nogil:
        """Move the complete frames out of the receive buffer (onto the chain first..last);
        start receiving a large frame in place. -1 when the stream cannot go on."""
        cdef const uint8_t* p = <const uint8_t*>self._buf
        cdef Py_ssize_t avail
        cdef int32_t length
        cdef char* mem
        cdef size_t cap
        cdef FrameNode* n
        cdef int rc
        while self._end - self._start >= 4:
            rc = tp_frame_size(p + self._start, self.max_frame_bytes, &length)
            if rc != TP_OK:
                self._fail(E_FRAME_SIZE, rc, length)
                return -1
            avail = self._end - self._start - 4
            if avail >= length:
                mem = <char*>malloc(length if length else 1)
                n = self._node(mem, length, length, False) if mem != NULL else NULL
                if n == NULL:
                    free(mem)
                    self._fail(E_NOMEM, length, 0)
                    return -1
                memcpy(mem, p + self._start + 4, length)
                if last[0] == NULL:
                    first[0] = n
                else:
                    last[0].next = n
                last[0] = n
                self._start += 4 + length
            elif length >= self._direct_min:
                mem = self._block(length, &cap)
                if mem == NULL:
                    self._fail(E_NOMEM, length, 0)
                    return -1
                memcpy(mem, p + self._start + 4, avail)
                self._cur = mem
                self._cur_cap = cap
                self._cur_len = length
                self._cur_fill = avail
                self._start = self._end
                self._scan_looked = False
                self._scan_batches = False
                self._scan_lookup()
                break
            else:
                break
        if self._start == self._end:
            self._start = self._end = 0
        return 0

    cdef void _scan_lookup(self) noexcept nogil:
        """Whether the large frame being received answers an announced Fetch: its
        correlation id is looked up once its first four bytes are there."""
        cdef int32_t corr
        cdef int i
        if not self._scan_looked:
            if self._cur_fill < 4:
                return
            self._scan_looked = True
            corr = <int32_t>load_be32(<const uint8_t*>self._cur)
            pthread_mutex_lock(&self._mu)
            for i in range(self._nexp):
                if self._exp_corr[i] == corr:
                    self._scan = fetchscan_new(self._exp_version[i], self._exp_crcs[i])
                    self._scan_batches = self._scan != NULL and self._exp_batches[i]
                    self._nexp -= 1
                    memmove(&self._exp_corr[i], &self._exp_corr[i + 1], (self._nexp - i) * sizeof(int32_t))
                    memmove(&self._exp_version[i], &self._exp_version[i + 1], (self._nexp - i) * sizeof(int))
                    memmove(&self._exp_crcs[i], &self._exp_crcs[i + 1], (self._nexp - i) * sizeof(bint))
                    memmove(&self._exp_batches[i], &self._exp_batches[i + 1], (self._nexp - i) * sizeof(bint))
                    break
            pthread_mutex_unlock(&self._mu)

    cdef void _loop(self) noexcept nogil:
        cdef Py_ssize_t want, got
        cdef FrameNode* first
        cdef FrameNode* last
        cdef FrameNode* n
        cdef bint stopping
        cdef int rc
        while True:
            pthread_mutex_lock(&self._mu)
            self._received += self._uncounted
            stopping = self._stopping
            pthread_mutex_unlock(&self._mu)
            self._uncounted = 0
            if stopping:
                return
            first = last = NULL
            if self._cur != NULL:
                want = self._cur_len - self._cur_fill
                got = tp_recv(&self._conn, self._cur + self._cur_fill, want)
            else:
                if self._start > 0 and self.buffer_size - self._end < self._direct_min:
                    memmove(self._buf, self._buf + self._start, self._end - self._start)
                    self._end -= self._start
                    self._start = 0
                want = self.buffer_size - self._end
                got = tp_recv(&self._conn, self._buf + self._end, want)
            if got == TP_AGAIN:
                # Nothing to read: scan the batches of the Fetch response being received
                # (a slice at a time, so that receiving, which the broker waits for, comes first).
                if (self._scan_batches and self._cur != NULL
                        and fetchscan_feed(self._scan, <const uint8_t*>self._cur, self._cur_fill,
                                           self._cur_len, SCAN_SLICE) > 0):
                    continue
                rc = tp_wait(&self._conn, False, self._stop[0], -1)
                if rc == TP_WOKEN:
                    return
                if rc == TP_IO:
                    self._fail(E_ERRNO, self._conn.err, 0)
                    return
                continue
            if got < 0:
                self._fail(E_ERRNO, self._conn.err, 0)
                return
            if got == 0:
                if self._cur != NULL:
                    self._fail(E_EOF, self._cur_fill, self._cur_len)
                elif self._end - self._start >= 4:
                    self._fail(E_EOF, self._end - self._start - 4,
                               <int32_t>load_be32(<const uint8_t*>self._buf + self._start))
                elif self._end > self._start:
                    self._fail(E_EOF, -1, -1)
                else:
                    self._fail(E_EOF, 0, 0)
                return
            self._uncounted = got
            if self._cur != NULL:
                self._cur_fill += got
                self._scan_lookup()
                if self._scan_batches and self._cur_fill < self._cur_len:
                    fetchscan_feed(self._scan, <const uint8_t*>self._cur, self._cur_fill,
                                   self._cur_len, SCAN_SLICE)
                if self._cur_fill == self._cur_len:
                    n = self._node(self._cur, self._cur_len, self._cur_cap, True)
                    if n == NULL:
                        self._fail(E_NOMEM, self._cur_len, 0)
                        return
                    if self._scan != NULL:
                        # The rest of the structure only: the frame goes to the owner now,
                        # the batches not yet scanned are scanned when they are decoded.
                        fetchscan_feed(self._scan, <const uint8_t*>self._cur, self._cur_len,
                                       self._cur_len, 0)
                    n.scan = self._scan
                    self._scan = NULL
                    self._scan_batches = False
                    first = last = n
                    self._cur = NULL
            else:
                self._end += got
                if self._split(&first, &last) < 0:
                    if first != NULL:
                        self._push(first, last)     # run() signals the end right after
                    return
            if first != NULL and self._push(first, last):
                self._wake_owner()

    # ------------------------------------------------------------------ the owner
    def take(self):
        """The frames completed so far (maybe none); raises the loop's end once they were all
        taken."""
        cdef char buf[64]
        cdef FrameNode* n
        cdef FrameNode* chain
        cdef list frames = []
        cdef int kind
        cdef int64_t a, b
        cdef bint ended
        cdef void* blk
        cdef void* old
        cdef FetchScan* scan
        cdef size_t got, old_size = 0
        if self._wake[0] < 0:
            raise RuntimeError("the receive loop was closed")
        self._check_process()
        # Drain the wake pipe before taking the queue: a frame queued after this is either
        # taken below or signals again.
        while read(self._wake[0], buf, sizeof(buf)) > 0:
            pass
        pthread_mutex_lock(&self._mu)
        chain = self._head
        self._head = self._tail = NULL
        self._signaled = False
        kind = self._err_kind
        a = self._err_a
        b = self._err_b
        ended = self._ended
        pthread_mutex_unlock(&self._mu)
        try:
            while chain != NULL:
                n = chain
                chain = n.next
                if n.large:
                    scan = n.scan
                    n.scan = NULL
                    try:
                        frame = frame_over(n.ptr, n.length, n.cap)   # owns the block, even if it raises
                    except BaseException:
                        fetchscan_free(scan)
                        free(n)
                        raise
                    frames.append(frame)
                    if scan != NULL:
                        # Owns the scan, even if it raises.
                        self._keep_scanned(<int32_t>load_be32(<const uint8_t*>n.ptr),
                                           scanned_fetch(scan, <const uint8_t*>n.ptr, n.length))
                    # A block for the loop's next frame of this size, if the pool has one.
                    # A full stash gives its oldest block back: blocks of sizes no longer
                    # received must not keep newer ones out.
                    blk = pool_take_pooled(pool_size_class(<size_t>n.length), &got)
                    if blk != NULL:
                        pthread_mutex_lock(&self._mu)
                        old = NULL
                        if self._nstash == _STASH:
                            old = self._stash_ptr[0]
                            old_size = self._stash_size[0]
                            self._nstash -= 1
                            memmove(&self._stash_ptr[0], &self._stash_ptr[1], self._nstash * sizeof(void*))
                            memmove(&self._stash_size[0], &self._stash_size[1], self._nstash * sizeof(size_t))
                        self._stash_ptr[self._nstash] = blk
                        self._stash_size[self._nstash] = got
                        self._nstash += 1
                        pthread_mutex_unlock(&self._mu)
                        pool_give(old, old_size)
                else:
                    try:
                        frames.append(PyBytes_FromStringAndSize(n.ptr, n.length))
                    finally:
                        free(n.ptr)
                        free(n)
                    continue
                free(n)
        finally:
            while chain != NULL:        # only after an exception: free what was not handed out
                n = chain
                chain = n.next
                fetchscan_free(n.scan)
                free(n.ptr)
                free(n)
        if kind != E_NONE or ended:
            if frames:
                self._wake_owner()      # the end is raised by the next call
                return frames
            raise self._end_error(kind, a, b)
        return frames

    cdef _keep_scanned(self, int32_t corr, object scanned):
        cdef dict kept = self._scanned
        # Bounded: a response whose request was given up is never asked for.
        while len(kept) >= _EXPECT:
            del kept[next(iter(kept))]
        kept[corr] = scanned

    def expect_fetch(self, int32_t correlation_id, int version, bint check_crcs, bint batches=True):
        """Scan the response to this Fetch (sent after this call) as it arrives: its
        structure, and, with ``batches``, its record batches (a slice after each read, and
        while the socket has nothing), leaving the rest to whoever decodes them. Of more
        than 16 announced and not yet arrived, the oldest is forgotten (its response is
        then decoded on the consumer's thread as any other)."""
        self._check_process()
        pthread_mutex_lock(&self._mu)
        if self._nexp == _EXPECT:
            self._nexp -= 1
            memmove(&self._exp_corr[0], &self._exp_corr[1], self._nexp * sizeof(int32_t))
            memmove(&self._exp_version[0], &self._exp_version[1], self._nexp * sizeof(int))
            memmove(&self._exp_crcs[0], &self._exp_crcs[1], self._nexp * sizeof(bint))
            memmove(&self._exp_batches[0], &self._exp_batches[1], self._nexp * sizeof(bint))
        self._exp_corr[self._nexp] = correlation_id
        self._exp_version[self._nexp] = version
        self._exp_crcs[self._nexp] = check_crcs
        self._exp_batches[self._nexp] = batches
        self._nexp += 1
        pthread_mutex_unlock(&self._mu)

    def take_scanned(self, int32_t correlation_id):
        """The scan of the response with this correlation id (a kcore.fetchscan.ScannedFetch),
        once its frame was taken; None if it was not scanned. Handed out once."""
        return self._scanned.pop(correlation_id, None)

    cdef object _end_error(self, int kind, int64_t a, int64_t b):
        if kind == E_EOF:
            if b > 0:
                return KafkaConnectionError(
                    f"connection closed by the peer after {a} of the {b} bytes of a frame")
            if a < 0:
                return KafkaConnectionError("connection closed by the peer after part of a "
                                            "frame size prefix")
            return KafkaConnectionError("connection closed by the peer")
        if kind == E_FRAME_SIZE:
            return frame_size_error(<int>a, b, self.max_frame_bytes)
        if kind == E_ERRNO:
            return OSError(<int>a, os.strerror(<int>a))
        if kind == E_NOMEM:
            return MemoryError(f"no memory to receive a frame of {a} bytes")
        return KafkaConnectionError("the receive loop was stopped")

    def stop(self):
        """Make run() return soon (it may already have); idempotent. A no-op in a process
        forked from the loop's: the stop pipe is shared with the parent, whose loop runs on."""
        cdef char one = 1
        if self._stop[1] < 0 or getpid() != self._pid:
            return
        pthread_mutex_lock(&self._mu)
        self._stopping = True
        self._ended = True          # a loop stopped before it ran never runs
        pthread_mutex_unlock(&self._mu)
        write(self._stop[1], &one, 1)

    cdef int _check_process(self) except -1:
        if getpid() != self._pid:
            raise RuntimeError("this receive loop belongs to the process that made it (this "
                               "process was forked from it)")
        return 0

    def close(self):
        """Free the buffers and close the pipes; the loop must have returned (RuntimeError
        if run() is still running: stop() it and join its thread first). In a forked child:
        only this process's copies are freed and closed."""
        if getpid() != self._pid:
            self._release()
            return
        pthread_mutex_lock(&self._mu)
        running = self._running
        pthread_mutex_unlock(&self._mu)
        if running:
            raise RuntimeError("close() while run() is running: stop() and join first")
        self._release()

# cython: language_level=3
"""A bounded pool of large malloc blocks, reused across decodes.

Fresh memory costs a page fault per 4 KiB on first touch (~30% of the perf samples of a
columnar decode before this pool): freed array blocks are kept here (bounded) and handed to
the next decode. Only touched with the GIL held (take/give happen outside `nogil` sections).

Callers ask for sizes in classes (pool_size_class: rounded up by at most 1/8) so a block
fits later requests of about the same size, and when the pool is full it frees its oldest
blocks first: the blocks it keeps are those of recent sizes. Fetch response frames
(kcore.frames) and decode arrays share it; before the classes and the oldest-first
eviction, the arrays of each columnar decode (record counts that vary, so they rarely fit
a pooled block) filled the 48 slots and pushed the response frames' blocks out, and the next
response took fresh pages (a page fault per 4 KiB received).
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdlib cimport malloc, free
from libc.string cimport memmove

__all__ = ["CArray", "pool_clear", "pool_limits", "pool_reserve", "pool_stats", "POOL_SLOTS",
           "POOL_MAX_TOTAL"]

cdef enum:
    _SLOTS = 128

POOL_SLOTS = _SLOTS
cdef void* _pool_ptr[_SLOTS]
cdef size_t _pool_size[_SLOTS]
cdef int _pool_count = 0
cdef size_t _pool_total = 0
cdef size_t _MAX_TOTAL = 64 << 20
cdef size_t _MAX_BLOCK = 16 << 20
cdef size_t _MIN_BLOCK = 16 << 10
cdef size_t _RESERVE_MAX = 1 << 31     # a Kafka frame's size is an int32
cdef size_t _HUGE_PAGE = 2 << 20        # x86-64's and (with 4 KiB pages) arm64's huge page size

cdef extern from *:
    """
    #include <stdlib.h>
    #include <sys/mman.h>
    #ifdef MADV_HUGEPAGE
    #define KC_HAVE_MADV_HUGEPAGE 1
    #define KC_MADV_HUGEPAGE MADV_HUGEPAGE
    #else
    #define KC_HAVE_MADV_HUGEPAGE 0
    #define KC_MADV_HUGEPAGE 0
    #endif
    """
    const bint KC_HAVE_MADV_HUGEPAGE
    const int KC_MADV_HUGEPAGE
    int posix_memalign(void** out, size_t alignment, size_t size) nogil
    int madvise(void* addr, size_t length, int advice) nogil
POOL_MAX_TOTAL = _MAX_TOTAL          # the default; pool_reserve may raise it (pool_limits)


cdef void _pool_drop(int i) noexcept:
    """Remove entry i, keeping the others in the order they were given back (oldest first)."""
    global _pool_count, _pool_total
    _pool_total -= _pool_size[i]
    _pool_count -= 1
    if i < _pool_count:
        memmove(&_pool_ptr[i], &_pool_ptr[i + 1], (_pool_count - i) * sizeof(void*))
        memmove(&_pool_size[i], &_pool_size[i + 1], (_pool_count - i) * sizeof(size_t))


cdef size_t pool_size_class(size_t n) noexcept nogil:
    """n rounded up to a multiple of the largest power of two that is at most n / 8 (so by
    at most 1/8; n itself below 16)."""
    cdef size_t step = 1
    while step * 16 <= n:
        step *= 2
    return (n + step - 1) // step * step


cdef void* pool_take_pooled(size_t need, size_t* got) noexcept:
    cdef int i, best = -1
    cdef void* p
    if need >= _MIN_BLOCK:
        for i in range(_pool_count):
            if pool_block_fits(need, _pool_size[i]):
                if best < 0 or _pool_size[i] < _pool_size[best]:
                    best = i
    if best < 0:
        return NULL
    p = _pool_ptr[best]
    got[0] = _pool_size[best]
    _pool_drop(best)
    return p


cdef void* pool_take(size_t need, size_t* got) noexcept:
    cdef void* p = pool_take_pooled(need, got)
    if p != NULL:
        return p
    got[0] = need
    return pool_alloc(need)


cdef void* pool_alloc(size_t n) noexcept nogil:
    """A new block for free(): blocks of a huge page or more start on a huge-page boundary
    and are advised to be backed by huge pages (Linux, transparent huge pages in "madvise"
    mode, the usual default). A fresh 8 MiB response block otherwise costs 2048 page faults
    on first touch (about 4 ms on the receiving thread against 1 ms, measured on a 2-core
    VM), and every fresh process pays that for its first answers."""
    cdef void* p = NULL
    if n < _HUGE_PAGE or not KC_HAVE_MADV_HUGEPAGE:
        return malloc(n if n else 1)
    if posix_memalign(&p, _HUGE_PAGE, n) != 0:
        return NULL
    # Only advice: where huge pages are off or none is free, the kernel uses small pages.
    madvise(p, n - n % _HUGE_PAGE, KC_MADV_HUGEPAGE)
    return p


cdef void pool_give(void* p, size_t size) noexcept:
    global _pool_count, _pool_total
    if p == NULL:
        return
    if size < _MIN_BLOCK or size > _MAX_BLOCK:
        free(p)
        return
    while _pool_count and (_pool_count == _SLOTS or _pool_total + size > _MAX_TOTAL):
        free(_pool_ptr[0])                      # evict the oldest block
        _pool_drop(0)
    _pool_ptr[_pool_count] = p
    _pool_size[_pool_count] = size
    _pool_count += 1
    _pool_total += size


def pool_reserve(largest_block):
    """Keep freed blocks of up to ``largest_block`` bytes, and room for two of them.

    By default blocks over 16 MiB are freed, not kept: a consumer whose fetch answers are
    larger (fetch.max.bytes of 50 MiB, say) then takes fresh pages for every answer, a page
    fault per 4 KiB. Limits only grow (the pool is the process's, shared by its consumers).
    """
    global _MAX_BLOCK, _MAX_TOTAL
    if not 0 <= largest_block <= _RESERVE_MAX:
        raise ValueError(f"pool_reserve: a block size must be 0 to {_RESERVE_MAX} bytes (the largest "
                         f"frame), got {largest_block!r}")
    cdef size_t n = largest_block
    if n > _MAX_BLOCK:
        _MAX_BLOCK = n
    if 2 * n > _MAX_TOTAL:
        _MAX_TOTAL = 2 * n


def pool_limits():
    """(largest block kept, most bytes held) in bytes."""
    return _MAX_BLOCK, _MAX_TOTAL


def pool_stats():
    """(blocks, bytes) currently held by the pool (for tests)."""
    return _pool_count, _pool_total


def pool_clear():
    """Free every pooled block (the memory goes back to the allocator)."""
    while _pool_count:
        free(_pool_ptr[0])
        _pool_drop(0)


cdef class CArray:
    """A read-only 1-D buffer over malloc'd memory it owns (numpy.frombuffer / pa.py_buffer)."""

    def __dealloc__(self):
        pool_give(self.ptr, self.capb)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("columnar buffers are read-only")
        view.buf = self.ptr
        view.obj = self
        view.len = self.nbytes
        view.readonly = 1
        view.itemsize = self.itemsize
        view.format = PyBytes_AS_STRING(self.fmt) if (flags & PyBUF_FORMAT) else NULL
        view.ndim = 1
        view.shape = self.shape if (flags & PyBUF_ND) == PyBUF_ND else NULL
        view.strides = self.strides if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __len__(self):
        return self.shape[0]


cdef CArray carray(void* ptr, Py_ssize_t count, Py_ssize_t itemsize, bytes fmt, size_t capb):
    cdef CArray a = CArray.__new__(CArray)
    if ptr == NULL:
        ptr = malloc(1)
        if ptr == NULL:
            raise MemoryError()
        count = 0
        capb = 1
    a.ptr = ptr
    a.capb = capb
    a.nbytes = count * itemsize
    a.itemsize = itemsize
    a.fmt = fmt
    a.shape[0] = count
    a.strides[0] = itemsize
    return a


cdef CArray new_carray(Py_ssize_t count, Py_ssize_t itemsize, bytes fmt):
    cdef size_t got
    cdef void* p = pool_take(count * itemsize, &got)
    if p == NULL:
        raise MemoryError()
    return carray(p, count, itemsize, fmt, got)

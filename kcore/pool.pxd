# cimport interface of kcore.pool: recycled malloc blocks for decode arrays, and the buffer
# object that owns one.

# With the GIL held (the pool is not locked): a block of at least `need` bytes, its real
# size in got[0]; NULL when out of memory. Blocks come from the pool when one fits.
cdef void* pool_take(size_t need, size_t* got) noexcept
# n rounded up (by at most 1/8) to its size class: ask for sizes in classes, and a block
# given back fits the next requests of about the same size.
cdef size_t pool_size_class(size_t n) noexcept nogil
# Whether a block of `size` bytes may serve a request for `need` (not more than about twice
# as large: a much larger block is kept for the requests it fits better).
cdef inline bint pool_block_fits(size_t need, size_t size) noexcept nogil:
    return need <= size <= 2 * need + (64 << 10)
# Any thread, no GIL needed: a new block of n bytes (never from the pool) for free() or
# pool_give(); large blocks are aligned and advised to use huge pages. NULL when out of memory.
cdef void* pool_alloc(size_t n) noexcept nogil
# With the GIL held: a pooled block of at least `need` bytes (as pool_take would pick), or
# NULL when none fits; never allocates.
cdef void* pool_take_pooled(size_t need, size_t* got) noexcept
# With the GIL held: hand a block (of `size` bytes, as pool_take reported) back; NULL is a no-op.
cdef void pool_give(void* p, size_t size) noexcept


# A read-only 1-D buffer over a block it owns (numpy.frombuffer / pyarrow.py_buffer); the
# block goes back to the pool when the object dies.
cdef class CArray:
    cdef void* ptr
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t itemsize
    cdef bytes fmt
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef size_t capb            # bytes actually allocated at ptr (>= nbytes)


# Take ownership of ptr (count items, capb bytes allocated); NULL becomes a 1-byte block.
cdef CArray carray(void* ptr, Py_ssize_t count, Py_ssize_t itemsize, bytes fmt, size_t capb)
# A new CArray of `count` items from the pool (contents undefined).
cdef CArray new_carray(Py_ssize_t count, Py_ssize_t itemsize, bytes fmt)

# cimport interface of kcore.cursor: a list cursor whose next() is an index step.
cdef class ListCursor:
    cdef list _items
    cdef Py_ssize_t _index   # the next item to hand out
    cdef Py_ssize_t _limit   # next() hands out items below this index without the owner
    cdef object _refill

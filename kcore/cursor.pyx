# cython: language_level=3
"""A cursor over a list whose next() is an index step: iteration over polled records.

A consumer iterated record by record (``for record in consumer``) would otherwise run Python
code for every record: the consumer's own ``__next__``, its thread check, its clock. Here the
owner loads one list of records at a time; while records remain and the owner has not held
the cursor, ``next()`` hands out the next one without calling Python code. When the loaded
list runs out, or the owner held the cursor because something changed that must be checked
first (a seek, a pause, a new assignment), ``next()`` calls the owner's ``refill`` callable,
which returns the next item (after ``load()``-ing more or ``resume()``-ing) or raises
StopIteration.

What has been handed out is read lazily: ``index`` is the number of items of the loaded list
already returned, so the owner derives positions only when something needs them.

Not locked: the owner calls every method under its own lock; ``next()`` runs entirely with
the GIL held and calls no Python code on its fast path, so it never interleaves with them.
"""
cimport cython


cdef class ListCursor:
    # Attributes in cursor.pxd.

    def __cinit__(self, refill not None):
        if not callable(refill):
            raise TypeError(f"ListCursor: refill must be callable, got {type(refill).__name__}")
        self._items = []
        self._index = 0
        self._limit = 0
        self._refill = refill

    def __iter__(self):
        return self

    @cython.boundscheck(False)      # both bounds are checked just before the read
    @cython.wraparound(False)
    def __next__(self):
        cdef Py_ssize_t i = self._index
        # The list is the owner's and may have been shortened behind our back (an interceptor
        # editing what poll returned): the length is checked, never assumed.
        if 0 <= i < self._limit and i < len(self._items):
            self._index = i + 1
            return self._items[i]
        return self._refill()

    def load(self, list items not None, Py_ssize_t start=0):
        """Hand out ``items[start:]`` next."""
        if start < 0 or start > len(items):
            raise ValueError(f"ListCursor.load: start {start} outside 0..{len(items)}")
        self._items = items
        self._index = start
        self._limit = len(items)

    def hold(self):
        """Stop the fast path: the next ``next()`` calls ``refill`` first."""
        self._limit = self._index

    def resume(self):
        """Hand out the rest of the loaded list without the owner again."""
        self._limit = len(self._items)

    def clear(self):
        """Forget the loaded list; returns it with the index reached, ``(items, index)``."""
        items, index = self._items, self._index
        self._items = []
        self._index = 0
        self._limit = 0
        return items, index

    @property
    def items(self):
        """The loaded list (the owner's object, not a copy)."""
        return self._items

    @property
    def index(self):
        """How many items of the loaded list have been handed out."""
        return self._index

    @property
    def remaining(self):
        """Items of the loaded list not handed out yet (held or not)."""
        return max(len(self._items) - self._index, 0)

    @property
    def held(self):
        """True while the fast path is stopped with items remaining."""
        return self._limit <= self._index < len(self._items)

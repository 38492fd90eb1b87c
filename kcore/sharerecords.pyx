# cython: language_level=3
"""A share consumer's records: consumer records inside the acquired ranges, with their delivery
counts (KIP-932).

A ShareFetch answer carries one partition's record batches and the ranges of offsets the broker
acquired for this member, each with a delivery count. ``share_records`` walks the decoded
records and the ranges together once: each record inside a range becomes a share record (the
consumer record's 13 items and the range's delivery count, built in C), and the offsets it
hands out and the acquired offsets that hold no record (transaction markers, compacted records)
come back as (first, last) runs, so the owner acknowledges them a run at a time, not an object
per record. ``acquired_rows`` picks the rows of a columnar decode that lie in the acquired
ranges, so records are made only for those (an answer may hold batches other members hold).
"""
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_Check
from libc.stdint cimport int64_t

cdef extern from "Python.h":
    PyObject* PyTuple_GET_ITEM(object p, Py_ssize_t pos)
    void PyTuple_SET_ITEM(object p, Py_ssize_t pos, PyObject* o)
    void PyObject_GC_UnTrack(object op)
    int PyObject_IS_GC(object op)

cdef extern from *:
    """
    /* An instance of a tuple subclass with n NULL items, as its type allocates them. */
    static PyObject* ksr_alloc(PyTypeObject* tp, Py_ssize_t n) { return tp->tp_alloc(tp, n); }
    """
    object ksr_alloc(PyTypeObject* tp, Py_ssize_t n)

#: Items of a consumer record (kafka-python's ConsumerRecord); the offset is item 3.
DEF CONSUMER_FIELDS = 13
DEF OFFSET_ITEM = 3


cdef int _check_share_cls(object record_cls) except -1:
    if not isinstance(record_cls, type) or not issubclass(record_cls, tuple) or record_cls is tuple:
        raise TypeError(f"record_cls must be a namedtuple class, got {record_cls!r}")
    fields = getattr(record_cls, "_fields", None)
    if not isinstance(fields, tuple) or len(fields) != CONSUMER_FIELDS + 1:
        raise TypeError(f"record_cls must have the 13 ConsumerRecord fields and delivery_count, "
                        f"got {fields!r}")
    return 0


cdef inline int64_t _offset_of(object rec, Py_ssize_t k) except? -1:
    if not PyTuple_Check(rec) or PyTuple_GET_SIZE(rec) != CONSUMER_FIELDS:
        raise TypeError(f"records[{k}] is not a 13-item consumer record: {type(rec).__name__}")
    return <object>PyTuple_GET_ITEM(rec, OFFSET_ITEM)


cdef int _add_run(list runs, int64_t first, int64_t last) except -1:
    """Append first..last to sorted runs, merged with the last run when they touch."""
    cdef Py_ssize_t n = len(runs)
    cdef int64_t prev_first, prev_last
    if n:
        prev_first, prev_last = runs[n - 1]
        if prev_last + 1 == first:
            runs[n - 1] = (prev_first, last)
            return 0
    runs.append((first, last))
    return 0


def share_records(list records not None, record_cls, ranges, *, bint gc_untrack=True):
    """See sharerecords.pyi."""
    cdef Py_ssize_t n = len(records), k = 0, i, nr
    cdef int64_t first, last, prev_last = 0, off, prev_off = 0, expect
    cdef int64_t run_first = 0, run_last = 0
    cdef bint have_prev_range = False, have_prev_off = False, have_run = False
    cdef list out = [], held = [], gaps = []
    cdef object rec, new, count, r
    cdef PyTypeObject* tp
    _check_share_cls(record_cls)
    tp = <PyTypeObject*>record_cls
    ranges = list(ranges)
    nr = len(ranges)
    for i in range(nr):
        r = ranges[i]
        if not isinstance(r, tuple) or len(r) != 3:
            raise TypeError(f"ranges[{i}] is not a (first, last, delivery_count) tuple: {r!r}")
        first = r[0]
        last = r[1]
        count = r[2]
        if not isinstance(count, int):
            raise TypeError(f"ranges[{i}]: delivery count {count!r} is not an int")
        if first < 0 or last < first:
            raise ValueError(f"ranges[{i}]: {first}..{last} is not a range of offsets")
        if have_prev_range and first <= prev_last:
            raise ValueError(f"ranges[{i}]: {first}..{last} overlaps or precedes the range before it")
        have_prev_range = True
        prev_last = last
        # records before the range: not acquired for this member
        while k < n:
            off = _offset_of(records[k], k)
            if have_prev_off and off <= prev_off:
                raise ValueError(f"records are not in ascending offset order at records[{k}]")
            if off >= first:
                break
            have_prev_off = True
            prev_off = off
            k += 1
        expect = first
        while k < n:
            rec = records[k]
            off = _offset_of(rec, k)
            if have_prev_off and off <= prev_off:
                raise ValueError(f"records are not in ascending offset order at records[{k}]")
            if off > last:
                break
            have_prev_off = True
            prev_off = off
            if off > expect:
                _add_run(gaps, expect, off - 1)
            new = ksr_alloc(tp, CONSUMER_FIELDS + 1)
            for i in range(CONSUMER_FIELDS):
                Py_INCREF(<object>PyTuple_GET_ITEM(rec, i))
                PyTuple_SET_ITEM(new, i, PyTuple_GET_ITEM(rec, i))
            Py_INCREF(count)
            PyTuple_SET_ITEM(new, CONSUMER_FIELDS, <PyObject*>count)
            if gc_untrack and PyObject_IS_GC(new):
                PyObject_GC_UnTrack(new)
            out.append(new)
            if have_run and off == run_last + 1:
                run_last = off
            else:
                if have_run:
                    _add_run(held, run_first, run_last)
                run_first = run_last = off
                have_run = True
            expect = off + 1
            k += 1
        if expect <= last:
            _add_run(gaps, expect, last)
    if have_run:
        _add_run(held, run_first, run_last)
    return out, held, gaps


def acquired_rows(const int64_t[::1] offsets not None, ranges):
    """See sharerecords.pyi."""
    cdef Py_ssize_t n = offsets.shape[0], k, i, nr, start
    cdef int64_t first, last, prev_last = 0
    cdef bint have_prev_range = False
    cdef list spans = []
    cdef object r
    for k in range(1, n):
        if offsets[k] <= offsets[k - 1]:
            raise ValueError(f"offsets are not in ascending order at row {k}")
    ranges = list(ranges)
    nr = len(ranges)
    k = 0
    for i in range(nr):
        r = ranges[i]
        if not isinstance(r, tuple) or len(r) != 3:
            raise TypeError(f"ranges[{i}] is not a (first, last, delivery_count) tuple: {r!r}")
        first = r[0]
        last = r[1]
        if first < 0 or last < first:
            raise ValueError(f"ranges[{i}]: {first}..{last} is not a range of offsets")
        if have_prev_range and first <= prev_last:
            raise ValueError(f"ranges[{i}]: {first}..{last} overlaps or precedes the range before it")
        have_prev_range = True
        prev_last = last
        while k < n and offsets[k] < first:
            k += 1
        start = k
        while k < n and offsets[k] <= last:
            k += 1
        if k > start:
            if spans and spans[len(spans) - 1][1] == start:
                spans[len(spans) - 1] = (spans[len(spans) - 1][0], k)
            else:
                spans.append((start, k))
    return spans

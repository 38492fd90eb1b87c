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
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_Check
from libc.stdint cimport int64_t, intptr_t

from kcore.columnar cimport ColumnarBatch
from kcore.consumerrecord cimport kc_record_new, kc_record_type_new, kc_tuple_like
from kcore.records cimport BatchInfo, Columns, batch_of_row, columns_of, compiled_twin, row_headers

cdef extern from "Python.h":
    PyObject* PyTuple_GET_ITEM(object p, Py_ssize_t pos)
    void PyTuple_SET_ITEM(object p, Py_ssize_t pos, PyObject* o)
    void PyObject_GC_UnTrack(object op)
    void PyObject_GC_Track(object op)
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


cdef struct Run:
    # the run of handed-out offsets being extended, not yet in its list
    int64_t first
    int64_t last
    bint open


cdef inline int _run_add(Run* run, list runs, int64_t off) except -1:
    """Extend the open run with off (the next offset handed out), or close it into runs and
    start another: one tuple per run, not per record."""
    if run.open and off == run.last + 1:
        run.last = off
        return 0
    if run.open:
        _add_run(runs, run.first, run.last)
    run.first = run.last = off
    run.open = True
    return 0


cdef inline int _run_close(Run* run, list runs) except -1:
    if run.open:
        _add_run(runs, run.first, run.last)
        run.open = False
    return 0


cdef object _range_at(list ranges, Py_ssize_t i, int64_t* first, int64_t* last,
                      int64_t* prev_last, bint check_count):
    """ranges[i]'s first and last offsets, checked to lie past ranges[i - 1] (ending at
    prev_last, then moved to this range's last); its delivery count (an int if check_count)."""
    r = ranges[i]
    if not isinstance(r, tuple) or len(r) != 3:
        raise TypeError(f"ranges[{i}] is not a (first, last, delivery_count) tuple: {r!r}")
    first[0] = r[0]
    last[0] = r[1]
    count = r[2]
    if check_count and not isinstance(count, int):
        raise TypeError(f"ranges[{i}]: delivery count {count!r} is not an int")
    if first[0] < 0 or last[0] < first[0]:
        raise ValueError(f"ranges[{i}]: {first[0]}..{last[0]} is not a range of offsets")
    if i > 0 and first[0] <= prev_last[0]:
        raise ValueError(f"ranges[{i}]: {first[0]}..{last[0]} overlaps or precedes the range "
                         f"before it")
    prev_last[0] = last[0]
    return count


def share_records(list records not None, record_cls, ranges, *, bint gc_untrack=True):
    """See sharerecords.pyi."""
    cdef Py_ssize_t n = len(records), k = 0, i, nr
    cdef int64_t first, last, prev_last = 0, off, prev_off = 0, expect
    cdef Run run = Run(0, 0, False)
    cdef bint have_prev_off = False
    cdef list out = [], held = [], gaps = []
    cdef object rec, new, count
    cdef PyTypeObject* tp
    _check_share_cls(record_cls)
    tp = <PyTypeObject*>record_cls
    ranges = list(ranges)
    nr = len(ranges)
    for i in range(nr):
        count = _range_at(ranges, i, &first, &last, &prev_last, True)
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
            _run_add(&run, held, off)
            expect = off + 1
            k += 1
        if expect <= last:
            _add_run(gaps, expect, last)
    _run_close(&run, held)
    return out, held, gaps


def acquired_rows(const int64_t[::1] offsets not None, ranges):
    """See sharerecords.pyi."""
    cdef Py_ssize_t n = offsets.shape[0], k, i, nr, start
    cdef int64_t first, last, prev_last = 0
    cdef list spans = []
    for k in range(1, n):
        if offsets[k] <= offsets[k - 1]:
            raise ValueError(f"offsets are not in ascending order at row {k}")
    ranges = list(ranges)
    nr = len(ranges)
    k = 0
    for i in range(nr):
        _range_at(ranges, i, &first, &last, &prev_last, False)
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


# ---------------------------------------------------------------------------------------------
# Share records in one step, from a columnar decode: no consumer record in between.

cdef extern from *:
    """
    /* A share record: a consumer record's 13 items (kcore/consumerrecord.h) and the delivery
       count, made in place in an instance of tp (a record type made by share_record_type
       takes its memory from the free list of the records this module's types freed:
       recordtype.h). Copies key and value. */
    static PyObject* ksr_share_record(
            PyTypeObject* tp, PyObject* topic, PyObject* partition, PyObject* epoch,
            long long offset, PyObject* ts, int ts_type,
            const char* kp, Py_ssize_t klen, const char* vp, Py_ssize_t vlen,
            PyObject* headers, long long hsize, int untrack, PyObject* count)
    {
        PyObject* t = kc_record_new(tp, KC_CONSUMER_FIELDS + 1, topic, partition, epoch,
                                    offset, ts, ts_type, kp, klen, vp, vlen, headers, hsize,
                                    untrack, NULL, NULL);
        if (t == NULL)
            return NULL;
        Py_INCREF(count);
        PyTuple_SET_ITEM(t, KC_CONSUMER_FIELDS, count);
        return t;
    }
    """
    object ksr_share_record(PyTypeObject* tp, object topic, object partition, object epoch,
                            long long offset, object ts, int ts_type,
                            const char* kp, Py_ssize_t klen, const char* vp, Py_ssize_t vlen,
                            PyObject* headers, long long hsize, int untrack, object count)


def share_record_type(cls):
    """See sharerecords.pyi."""
    return compiled_twin(cls, "share_record_type", kc_record_type_new)


def share_records_of(ColumnarBatch batch not None, record_cls, topic, int partition, ranges, *,
                     bint gc_untrack=True):
    """See sharerecords.pyi."""
    cdef Py_buffer view
    cdef Py_ssize_t n, i = 0, r_i, nr, lo = 0, bend = 0, dlen, total = 0, filled = 0
    cdef Columns col
    cdef intptr_t base
    cdef int64_t first, last, prev_last = 0, off, expect, ts, last_ts = 0, hsize
    cdef Run run = Run(0, 0, False)
    cdef BatchInfo b
    cdef list batches, out, held = [], gaps = []
    cdef object count, rec, hl, ts_obj = None, epoch = None
    cdef object part = partition        # one int object for every record
    cdef PyTypeObject* tp
    cdef int untrack = gc_untrack
    _check_share_cls(record_cls)
    if not kc_tuple_like(<PyTypeObject*>record_cls):
        raise TypeError(f"record_cls must be a namedtuple class (a tuple subclass with "
                        f"__slots__ = ()), got {record_cls!r}")
    tp = <PyTypeObject*>record_cls
    ranges = list(ranges)
    nr = len(ranges)
    col = columns_of(batch)
    n = col.n
    batches = batch.batches
    if batches is None:
        raise TypeError("ColumnarBatch.batches is not a list")
    for i in range(1, n):
        if col.offs[i] <= col.offs[i - 1]:
            raise ValueError(f"offsets are not in ascending order at row {i}")
    # The rows inside the ranges, counted first (the ranges are checked here, before any
    # record is made): the list of records is made at its size and filled in place, where
    # appending grew it some seventy times for an answer of 9,000 records.
    i = 0
    for r_i in range(nr):
        _range_at(ranges, r_i, &first, &last, &prev_last, True)
        while i < n and col.offs[i] < first:
            i += 1
        while i < n and col.offs[i] <= last:
            total += 1
            i += 1
    # While slots are still NULL the list is kept out of the cyclic GC; a slot not reached
    # when something raises stays NULL, which the list's dealloc skips.
    out = PyList_New(total)
    PyObject_GC_UnTrack(out)
    i = 0
    prev_last = 0
    PyObject_GetBuffer(batch._data, &view, PyBUF_SIMPLE)
    try:
        base = <intptr_t>view.buf
        dlen = view.len
        for r_i in range(nr):
            count = _range_at(ranges, r_i, &first, &last, &prev_last, True)
            while i < n and col.offs[i] < first:     # rows not acquired for this member
                i += 1
            expect = first
            while i < n and col.offs[i] <= last:
                off = col.offs[i]
                if off > expect:
                    _add_run(gaps, expect, off - 1)
                if i >= bend:
                    b = batch_of_row(batches, &lo, i)
                    bend = b.record_end
                    epoch = b.partition_leader_epoch
                ts = col.tss[i]
                if ts != last_ts or ts_obj is None:
                    ts_obj = ts
                    last_ts = ts
                hl = row_headers(&col, i, base, dlen, untrack, &hsize)
                rec = ksr_share_record(tp, topic, part, epoch, off, ts_obj, col.tst[i],
                                       <const char*>(base + col.kp[i]), col.kl[i],
                                       <const char*>(base + col.vp[i]), col.vl[i],
                                       NULL if hl is None else <PyObject*>hl, hsize, untrack,
                                       count)
                Py_INCREF(rec)                      # the list's reference (SET_ITEM steals one)
                PyList_SET_ITEM(out, filled, rec)
                filled += 1
                _run_add(&run, held, off)
                expect = off + 1
                i += 1
            if expect <= last:
                _add_run(gaps, expect, last)
    finally:
        PyBuffer_Release(&view)
    PyObject_GC_Track(out)
    _run_close(&run, held)
    return out, held, gaps

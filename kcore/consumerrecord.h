/* Consumer records made in C: one tuple-subclass instance per record, filled in place (no
 * intermediate Record, no argument tuple), so that each slot costs one store and no temporary
 * reference juggling. kcore.records makes consumer records (13 items) with it, and
 * kcore.sharerecords share records (the same 13 items and a delivery count). Every function
 * here runs with the GIL held.
 */
#ifndef KC_CONSUMERRECORD_H
#define KC_CONSUMERRECORD_H

#include "recordtype.h"

/* Items of a consumer record (kafka-python's ConsumerRecord order). */
#define KC_CONSUMER_FIELDS 13

/* Ints -5..256 are the interpreter's cached objects; PyLong_FromLong returns them through a
   call each time. A record has four such ints (timestamp type, key and value sizes below 257,
   headers size) and often a fifth (a small offset): looked up inline here instead, each slot
   filled with the interpreter's object on first use (GIL held) and kept. */
#define KC_SMALL_MIN (-5)
#define KC_SMALL_MAX 256
static PyObject* kc_small_ints[KC_SMALL_MAX - KC_SMALL_MIN + 1];
static PyObject* kc_small_int_slow(long long v)
{
    PyObject* o = PyLong_FromLongLong(v);
    if (o != NULL) {
        Py_INCREF(o);                 /* the slot's reference */
        kc_small_ints[v - KC_SMALL_MIN] = o;
    }
    return o;
}
static inline PyObject* kc_int(long long v)
{
    PyObject* o;
    if (v < KC_SMALL_MIN || v > KC_SMALL_MAX)
        return PyLong_FromLongLong(v);
    o = kc_small_ints[v - KC_SMALL_MIN];
    if (o == NULL)
        return kc_small_int_slow(v);
    Py_INCREF(o);
    return o;
}

/* Sizes past the small-int cache (values of 1 KB, 10 KB) are usually the same from one record
   to the next: the last such object is reused rather than a new int made and freed per record. */
static PyObject* kc_size_last = NULL;
static Py_ssize_t kc_size_last_n = -1;
static PyObject* kc_size_obj_large(Py_ssize_t n)
{
    PyObject* o;
    if (n == kc_size_last_n && kc_size_last != NULL) {
        Py_INCREF(kc_size_last);
        return kc_size_last;
    }
    o = PyLong_FromSsize_t(n);
    if (o != NULL) {
        Py_INCREF(o);
        Py_XSETREF(kc_size_last, o);
        kc_size_last_n = n;
    }
    return o;
}

/* A serialized size as an int. */
static inline PyObject* kc_size_obj(Py_ssize_t n)
{
    return n <= KC_SMALL_MAX ? kc_int(n) : kc_size_obj_large(n);
}

/* A memoryview of base[start:start+len] (base: a one-dimensional "B" memoryview); the slice
   shares base's managed buffer, so the exporter (the fetched frame or the decompressed data)
   lives as long as the slice does. Tracked by the cyclic GC, as every memoryview is
   (kc_record_new untracks the views of a record type's instance: see recordtype.h). */
static PyObject* kc_view_slice(PyObject* base, Py_ssize_t start, Py_ssize_t len)
{
#if PY_VERSION_HEX < 0x030F0000 && !defined(Py_LIMITED_API)
    /* What slicing does (a new view registered on base's managed buffer, then its start and
       length moved), without the two ints and the slice object that base[start:stop] makes
       per record. base is one-dimensional, contiguous, format "B", itemsize 1 (checked by the
       caller), so the slice is contiguous too and its flags, strides and format are base's. */
    PyObject* o = PyMemoryView_FromObject(base);
    Py_buffer* v;
    if (o == NULL)
        return NULL;
    v = PyMemoryView_GET_BUFFER(o);
    v->buf = (char*)v->buf + start;
    v->len = len;
    v->shape[0] = len;
    return o;
#else
    return PySequence_GetSlice(base, start, start + len);
#endif
}

/* A record's key or value: None (len -1), a view of views (see kc_record_new), or bytes. */
static inline PyObject* kc_payload(const char* p, Py_ssize_t len, PyObject* views,
                                   const char* vbase, int untrack_views)
{
    PyObject* o;
    if (len < 0) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    if (views == NULL) {
#if KC_OBJ_REUSE
        if ((o = kc_bytes_take(p, len)) != NULL)
            return o;
#endif
        return PyBytes_FromStringAndSize(p, len);
    }
    o = kc_view_slice(views, p - vbase, len);
    if (o != NULL && untrack_views)
        PyObject_GC_UnTrack(o);
    return o;
}

/* An instance of tp with n items (n >= 13), the first 13 a consumer record's:
   (topic, partition, leader_epoch, offset, timestamp, timestamp_type, key, value, headers,
   checksum, serialized_key_size, serialized_value_size, serialized_header_size); items past
   the 13th are left NULL for the caller to fill before anyone else sees the instance.
   headers: the record's list, or NULL for an empty one of its own. hsize: its serialized size.
   views: NULL to copy key and value into bytes; else a memoryview over the data starting at
   vbase, sliced for each (zero-copy records). Views in a record type's instance are untracked
   while it holds them (recordtype.h: its dealloc tracks them again); any other class's keep
   theirs tracked. untrack: the instance (and the empty headers list made for it) is left out
   of the cyclic GC. */
static inline PyObject* kc_record_new(
        PyTypeObject* tp, Py_ssize_t n, PyObject* topic, PyObject* partition, PyObject* epoch,
        long long offset, PyObject* ts, int ts_type,
        const char* kp, Py_ssize_t klen, const char* vp, Py_ssize_t vlen,
        PyObject* headers, long long hsize, int untrack, PyObject* views, const char* vbase)
{
    int untrack_views = KC_VIEW_UNTRACK && untrack && tp->tp_dealloc == kc_rec_dealloc;
    Py_ssize_t k;           /* the slot being filled: those before it are set */
#if PY_VERSION_HEX < 0x030E0000
    /* Allocated untracked (tracked at the end if asked), unlike tp_alloc, which zero-fills,
       tracks (linking the object into the collector's list, next to the last object
       allocated), and would be untracked again at once; a record type's instances come from
       its free list (recordtype.h). kc_tuple_like checked that tp adds nothing to a tuple: up
       to Python 3.13 a tuple is its header and its item slots, nothing else (3.14 adds a hash
       cache: tp_alloc). The 13 slots are written below without being zeroed first (a failure
       NULLs those not reached before the instance is freed); items past them start NULL. */
    PyObject* t = kc_rec_alloc_from(tp, n, KC_CONSUMER_FIELDS);
    PyObject* o;
    if (t == NULL)
        return NULL;
#else
    PyObject* t = tp->tp_alloc(tp, n);
    PyObject* o;
    if (t == NULL)
        return NULL;
    if (untrack)
        PyObject_GC_UnTrack(t);
#endif
    Py_INCREF(topic); PyTuple_SET_ITEM(t, 0, topic);
    Py_INCREF(partition); PyTuple_SET_ITEM(t, 1, partition);
    Py_INCREF(epoch); PyTuple_SET_ITEM(t, 2, epoch);
    k = 3;
#if KC_OBJ_REUSE
    if (offset <= KC_SMALL_MAX || (o = kc_long_take(offset)) == NULL)
#endif
    if ((o = kc_int(offset)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 3, o);
    Py_INCREF(ts); PyTuple_SET_ITEM(t, 4, ts);
    k = 5;
    if ((o = kc_int(ts_type)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 5, o);
    k = 6;
    if ((o = kc_payload(kp, klen, views, vbase, untrack_views)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 6, o);
    k = 7;
    if ((o = kc_payload(vp, vlen, views, vbase, untrack_views)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 7, o);
    k = 8;
    if (headers != NULL) { o = headers; Py_INCREF(o); }
#if KC_REC_FREELIST
    else if (untrack && (o = kc_hdr_take()) != NULL) { }   /* empty, untracked, ours */
#endif
    else if (untrack) {
        /* An empty list made untracked (PyList_New(0) tracks it, and untracking unlinks it
           again from its neighbours in the collector's list). */
        PyListObject* l = PyObject_GC_New(PyListObject, &PyList_Type);
        if (l == NULL) goto fail;
        Py_SET_SIZE(l, 0);
        l->ob_item = NULL;
        l->allocated = 0;
        o = (PyObject*)l;
    }
    else if ((o = PyList_New(0)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 8, o);
    Py_INCREF(Py_None); PyTuple_SET_ITEM(t, 9, Py_None);
    k = 10;
    if ((o = kc_size_obj(klen)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 10, o);
    k = 11;
    if ((o = kc_size_obj(vlen)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 11, o);
    k = 12;
    if ((o = kc_int(hsize)) == NULL) goto fail;
    PyTuple_SET_ITEM(t, 12, o);
#if PY_VERSION_HEX < 0x030E0000
    /* Only now: the collector may run during the allocations above, and must never walk
       slots not yet written. */
    if (!untrack)
        PyObject_GC_Track(t);
#endif
    return t;
fail:
    for (; k < KC_CONSUMER_FIELDS; k++)
        PyTuple_SET_ITEM(t, k, NULL);
    Py_DECREF(t);   /* unset slots are NULL: the dealloc skips them */
    return NULL;
}

static inline void kc_gc_untrack(PyObject* o)
{
    if (PyObject_GC_IsTracked(o))
        PyObject_GC_UnTrack(o);
}

/* A tuple subclass adding no C fields, __dict__ or __weakref__ (namedtuple's __slots__ = ()):
   tp_alloc(tp, n) yields a tuple of n NULL slots we may fill. */
static inline int kc_tuple_like(PyTypeObject* tp)
{
    return PyType_IsSubtype(tp, &PyTuple_Type) && tp != &PyTuple_Type
        && tp->tp_basicsize == PyTuple_Type.tp_basicsize
        && tp->tp_itemsize == PyTuple_Type.tp_itemsize
        && tp->tp_dictoffset == 0 && tp->tp_weaklistoffset == 0
        && tp->tp_alloc != NULL;
}

static inline int kc_is_ascii(PyObject* s) { return PyUnicode_IS_ASCII(s); }

#endif

/* Compiled record types: namedtuple classes whose instances are cheap to make, read and free.
 *
 * A type made by kc_record_type_new is a tuple subclass like a namedtuple class, with two
 * differences that matter per record:
 *   - each field is a member descriptor (T_OBJECT_EX, read-only) at the tuple slot's offset,
 *     so CPython's attribute specialisation reads ``rec.value`` like an instance slot; a
 *     namedtuple's field getters are descriptors the interpreter cannot specialise;
 *   - freed instances keep their memory on a free list (per item count, bounded), and
 *     kc_rec_alloc_from takes from it, so a poll's records reuse the memory of the previous poll's.
 *     The list grows as records are freed, up to KC_REC_FREELIST_MAX: a poll of
 *     max.poll.records (10,000 in tuned set-ups) is recycled whole, where a list of 1,024
 *     sent nine records in ten of such a poll through the allocator and back.
 * The free list is touched only with the GIL held (alloc and dealloc run under it).  Builds
 * without a GIL, with reference tracing, or 3.14+ (whose tuples cache their hash) allocate
 * and free normally.
 */
#ifndef KC_RECORDTYPE_H
#define KC_RECORDTYPE_H

#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <string.h>

#define KC_REC_MAX_FIELDS 32          /* field count of the largest record type */
#define KC_REC_FREELIST_MAX 32768     /* freed instances kept per item count (~4 MiB of records) */
#define KC_REC_HEADERS 8              /* the headers slot of a consumer (13 items) or share (14) record */
#define KC_REC_OFFSET 3               /* ... its offset */
#define KC_REC_VALUE_SLOT 7           /* ... its value */

#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED) && !defined(Py_TRACE_REFS) \
    && !defined(Py_REF_DEBUG)
#define KC_REC_FREELIST 1

/* Whether the cyclic GC tracks o (a GC object), read inline: every record freed asks it of
 * itself and of its headers list, and PyObject_GC_IsTracked is a call into the interpreter
 * each time. Up to 3.13 with the GIL, a GC object's header (two words, the first the link
 * to the next tracked object, 0 when untracked) lies just before it: CPython's own test
 * (_PyObject_GC_IS_TRACKED) reads that word. */
typedef struct { uintptr_t next; uintptr_t prev; } kc_gc_head;
static inline int kc_gc_is_tracked(PyObject* o)
{
    return ((kc_gc_head*)o - 1)->next != 0;
}

static PyObject** kc_rec_free[KC_REC_MAX_FIELDS + 1];   /* grown on demand (PyMem, GIL held) */
static Py_ssize_t kc_rec_nfree[KC_REC_MAX_FIELDS + 1];
static Py_ssize_t kc_rec_cap[KC_REC_MAX_FIELDS + 1];

/* Room for one more freed instance of n items; 0 if the list is full or cannot grow. */
static int kc_rec_free_room(Py_ssize_t n)
{
    Py_ssize_t cap;
    PyObject** grown;
    if (kc_rec_nfree[n] < kc_rec_cap[n])
        return 1;
    if (kc_rec_cap[n] >= KC_REC_FREELIST_MAX)
        return 0;
    cap = kc_rec_cap[n] ? kc_rec_cap[n] * 2 : 256;
    if (cap > KC_REC_FREELIST_MAX)
        cap = KC_REC_FREELIST_MAX;
    grown = (PyObject**)PyMem_Realloc(kc_rec_free[n], (size_t)cap * sizeof(PyObject*));
    if (grown == NULL)
        return 0;             /* no error is set: the instance is freed normally instead */
    kc_rec_free[n] = grown;
    kc_rec_cap[n] = cap;
    return 1;
}

/* Empty headers lists, kept for the next records. A consumer record without headers gets an
 * empty list of its own (kafka-python's shape; the application may append to it). When the
 * record is freed and its list is still what it was made as (empty, never grown, untracked,
 * referred to by nothing else: refcount 1), nobody can tell that list from a new one, so it
 * is kept here and handed to the next record instead of being freed and allocated again. */
#define KC_HDR_FREELIST_MAX 32768
static PyObject** kc_hdr_free;
static Py_ssize_t kc_hdr_nfree;
static Py_ssize_t kc_hdr_cap;

/* Takes o (a reference) if it can be reused; 0 otherwise (o untouched). */
static int kc_hdr_keep(PyObject* o)
{
    if (!Py_IS_TYPE(o, &PyList_Type) || Py_REFCNT(o) != 1 || Py_SIZE(o) != 0
            || ((PyListObject*)o)->ob_item != NULL || ((PyListObject*)o)->allocated != 0
            || kc_gc_is_tracked(o))
        return 0;
    if (kc_hdr_nfree == kc_hdr_cap) {
        Py_ssize_t cap = kc_hdr_cap ? kc_hdr_cap * 2 : 256;
        PyObject** grown;
        if (kc_hdr_cap >= KC_HDR_FREELIST_MAX)
            return 0;
        if (cap > KC_HDR_FREELIST_MAX)
            cap = KC_HDR_FREELIST_MAX;
        grown = (PyObject**)PyMem_Realloc(kc_hdr_free, (size_t)cap * sizeof(PyObject*));
        if (grown == NULL)
            return 0;
        kc_hdr_free = grown;
        kc_hdr_cap = cap;
    }
    kc_hdr_free[kc_hdr_nfree++] = o;
    return 1;
}

/* A new reference to an empty, untracked list from the free list, or NULL (no error set). */
static inline PyObject* kc_hdr_take(void)
{
    return kc_hdr_nfree > 0 ? kc_hdr_free[--kc_hdr_nfree] : NULL;
}

/* Values and offsets of freed records, kept for the next records. When a consumer record is
 * freed and its value's bytes (or its offset's int) are referred to by nothing else
 * (refcount 1), nobody can tell them from new objects: instead of being freed and allocated
 * again for the next record, they are kept here and refilled in place (the bytes' content and
 * cached hash, the int's digits). Bytes are kept for one size at a time (the size the last
 * kept ones had: a topic's values are usually of one size), ints of one or two 30-bit digits
 * (offsets below 2**60), up to KC_OBJ_FREELIST_MAX each and KC_BYTES_KEPT_MAX bytes of values. */
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
#define KC_OBJ_REUSE 1
#define KC_OBJ_FREELIST_MAX 16384
#define KC_BYTES_KEPT_MAX (4 << 20)
static PyObject** kc_bytes_free;
static Py_ssize_t kc_bytes_nfree;
static Py_ssize_t kc_bytes_cap;
static Py_ssize_t kc_bytes_size = -1;      /* the size of the bytes kept */
static Py_ssize_t kc_bytes_max;            /* how many of that size: KC_BYTES_KEPT_MAX / size */
static PyObject** kc_long_free[3];         /* by digit count (1 or 2) */
static Py_ssize_t kc_long_nfree[3];
static Py_ssize_t kc_long_cap[3];

static int kc_obj_room(PyObject*** list, Py_ssize_t* nfree, Py_ssize_t* cap, Py_ssize_t max)
{
    Py_ssize_t c;
    PyObject** grown;
    if (*nfree < *cap)
        return 1;
    if (*cap >= max)
        return 0;
    c = *cap ? *cap * 2 : 256;
    if (c > max)
        c = max;
    grown = (PyObject**)PyMem_Realloc(*list, (size_t)c * sizeof(PyObject*));
    if (grown == NULL)
        return 0;
    *list = grown;
    *cap = c;
    return 1;
}

/* Takes o (a reference) if it is a value that can be refilled; 0 otherwise (o untouched). */
static int kc_bytes_keep(PyObject* o)
{
    Py_ssize_t n;
    if (!PyBytes_CheckExact(o) || Py_REFCNT(o) != 1)
        return 0;
    n = Py_SIZE(o);
    if (n < 2)
        return 0;               /* the empty and one-byte bytes are the interpreter's, shared */
    if (n != kc_bytes_size) {
        if (kc_bytes_nfree > 0 || n > KC_BYTES_KEPT_MAX / 64)
            return 0;
        kc_bytes_size = n;
        kc_bytes_max = KC_BYTES_KEPT_MAX / n;     /* once per size, not a division per record */
    }
    if (kc_bytes_nfree >= kc_bytes_max
            || !kc_obj_room(&kc_bytes_free, &kc_bytes_nfree, &kc_bytes_cap, KC_OBJ_FREELIST_MAX))
        return 0;
    kc_bytes_free[kc_bytes_nfree++] = o;
    return 1;
}

/* A new reference to bytes holding p[0:n], refilled from the free list, or NULL (no error set). */
static inline PyObject* kc_bytes_take(const char* p, Py_ssize_t n)
{
    PyBytesObject* b;
    if (n != kc_bytes_size || kc_bytes_nfree == 0)
        return NULL;
    b = (PyBytesObject*)kc_bytes_free[--kc_bytes_nfree];
    memcpy(b->ob_sval, p, (size_t)n);      /* ob_sval[n] is the terminating NUL already */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    b->ob_shash = -1;                       /* the hash of the old content is cached there */
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    return (PyObject*)b;
}

/* Takes o (a reference) if it is an int that can be refilled; 0 otherwise (o untouched). */
static int kc_long_keep(PyObject* o)
{
    Py_ssize_t d;
    if (!PyLong_CheckExact(o) || Py_REFCNT(o) != 1)
        return 0;
    d = Py_SIZE(o);         /* the digit count; negative for negative ints */
    if (d < 1 || d > 2 || !kc_obj_room(&kc_long_free[d], &kc_long_nfree[d], &kc_long_cap[d],
                                       KC_OBJ_FREELIST_MAX))
        return 0;
    kc_long_free[d][kc_long_nfree[d]++] = o;
    return 1;
}

/* A new reference to the int v (257 <= v < 2**60), refilled from the free list, or NULL. */
static inline PyObject* kc_long_take(long long v)
{
    PyLongObject* o;
    if (v < (1LL << 30)) {
        if (kc_long_nfree[1] == 0)
            return NULL;
        o = (PyLongObject*)kc_long_free[1][--kc_long_nfree[1]];
        o->ob_digit[0] = (digit)v;
    } else if (v < (1LL << 60)) {
        if (kc_long_nfree[2] == 0)
            return NULL;
        o = (PyLongObject*)kc_long_free[2][--kc_long_nfree[2]];
        o->ob_digit[0] = (digit)(v & PyLong_MASK);
        o->ob_digit[1] = (digit)(v >> PyLong_SHIFT);
    } else
        return NULL;
    return (PyObject*)o;
}

static void kc_obj_freelists_clear(void)
{
    int d;
    while (kc_bytes_nfree > 0)
        Py_DECREF(kc_bytes_free[--kc_bytes_nfree]);
    kc_bytes_size = -1;
    for (d = 1; d <= 2; d++)
        while (kc_long_nfree[d] > 0)
            Py_DECREF(kc_long_free[d][--kc_long_nfree[d]]);
}
#else
#define KC_OBJ_REUSE 0
#endif
#else
#define KC_REC_FREELIST 0
#define KC_OBJ_REUSE 0
#endif

/* Zero-copy consumer records (kcore.records.consumer_records(views=True)) hold their key and
 * value as memoryviews, which CPython tracks in the cyclic GC: measured, the collections
 * they set off cost more than the copy they save at 100 B values. They cannot be part of a
 * cycle (a view refers only to its buffer), so a view made for a record of a record type is
 * untracked while that record holds it, and tracked again when the record is freed: a
 * memoryview's dealloc unlinks it from the GC's list unconditionally, so it must be tracked
 * by the time its last reference goes, and while the record lives it holds one. Only key
 * and value (slots 6 and 7 of a 13-field record) are ever such views. */
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define KC_VIEW_UNTRACK 1
#define KC_REC_KEY 6
#define KC_REC_VALUE 7
static inline void kc_view_retrack(PyObject* o)
{
    if (o != NULL && Py_TYPE(o) == &PyMemoryView_Type && !PyObject_GC_IsTracked(o))
        PyObject_GC_Track(o);
}
#else
#define KC_VIEW_UNTRACK 0
#endif

static void kc_rec_dealloc(PyObject* op);

/* The last of kc_rec_dealloc, its items released: op's memory goes to the free list (or back
 * to the allocator), and the reference op held to its type goes. */
static inline void kc_rec_release(PyObject* op, PyTypeObject* tp, Py_ssize_t n)
{
#if KC_REC_FREELIST
    /* Only instances of a record type itself: a Python subclass may add a __dict__. */
    if (tp->tp_dealloc == kc_rec_dealloc && n <= KC_REC_MAX_FIELDS
            && kc_rec_free_room(n)) {
        /* Kept as a plain tuple: its type (released just below) may be freed before the
           memory is reused or given back, and kc_rec_freelist_clear's PyObject_GC_Del reads
           the type of what it frees. A record type adds nothing to a tuple's layout. */
        Py_SET_TYPE(op, &PyTuple_Type);
        kc_rec_free[n][kc_rec_nfree[n]++] = op;
    }
    else
#else
    (void)n;
#endif
        tp->tp_free(op);
    Py_DECREF(tp);       /* a heap type's instances own a reference to it */
}

static void kc_rec_dealloc(PyObject* op)
{
    PyTypeObject* tp = Py_TYPE(op);
    Py_ssize_t n = Py_SIZE(op), i;
#if KC_REC_FREELIST
    if (kc_gc_is_tracked(op))       /* a record made by kcore is usually not */
#endif
        PyObject_GC_UnTrack(op);
#if KC_VIEW_UNTRACK
    if (n == 13) {
        kc_view_retrack(PyTuple_GET_ITEM(op, KC_REC_KEY));
        kc_view_retrack(PyTuple_GET_ITEM(op, KC_REC_VALUE));
    }
#endif
#if KC_REC_FREELIST
    /* a share record (kcore.sharerecords) is a consumer record's 13 items and the delivery
       count: its headers are at the same slot */
    if (n == 13 || n == 14) {
        PyObject* h = PyTuple_GET_ITEM(op, KC_REC_HEADERS);
        if (h != NULL && kc_hdr_keep(h))
            PyTuple_SET_ITEM(op, KC_REC_HEADERS, NULL);
#if KC_OBJ_REUSE
        h = PyTuple_GET_ITEM(op, KC_REC_OFFSET);
        if (h != NULL && kc_long_keep(h))
            PyTuple_SET_ITEM(op, KC_REC_OFFSET, NULL);
        h = PyTuple_GET_ITEM(op, KC_REC_VALUE_SLOT);
        if (h != NULL && kc_bytes_keep(h))
            PyTuple_SET_ITEM(op, KC_REC_VALUE_SLOT, NULL);
#endif
    }
    /* The items still referred to elsewhere (the topic, the partition, a timestamp shared
       with the next records, None, small ints: usually all that is left) are released here,
       which frees nothing. Only when an item is freed with the record can its dealloc nest
       (a chain of containers): then, and only then, the trashcan bounds the depth, as a
       tuple's dealloc does; its bookkeeping was a twentieth of the record path. */
    {
        int freed = 0;
        for (i = n; --i >= 0; ) {
            PyObject* o = PyTuple_GET_ITEM(op, i);
            if (o == NULL)
                continue;
            if (Py_REFCNT(o) > 1) {
                Py_DECREF(o);       /* not the last reference: frees nothing */
                PyTuple_SET_ITEM(op, i, NULL);
            } else
                freed = 1;
        }
        if (!freed) {
            kc_rec_release(op, tp, n);
            return;
        }
    }
#endif
    Py_TRASHCAN_BEGIN(op, kc_rec_dealloc)
    for (i = n; --i >= 0; )
        Py_XDECREF(PyTuple_GET_ITEM(op, i));
    kc_rec_release(op, tp, n);
    Py_TRASHCAN_END
}

/* An instance of tp (a record type, or any tuple-like class: see kc_tuple_like) with n items,
 * not tracked by the cyclic GC, whose slots from `unset` on are NULL; slots before `unset` hold
 * whatever the memory held, for a caller that fills them at once (and NULLs those it did not
 * reach before anything can see or free the instance): zeroing slots about to be written was
 * a tenth of making a consumer record. */
static PyObject* kc_rec_alloc_from(PyTypeObject* tp, Py_ssize_t n, Py_ssize_t unset)
{
    PyObject* op;
    Py_ssize_t i;
#if KC_REC_FREELIST
    if (tp->tp_dealloc == kc_rec_dealloc && n <= KC_REC_MAX_FIELDS && kc_rec_nfree[n] > 0) {
        op = kc_rec_free[n][--kc_rec_nfree[n]];
        Py_SET_TYPE(op, tp);
        Py_INCREF(tp);
        Py_SET_REFCNT(op, 1);
        for (i = unset; i < n; i++)
            PyTuple_SET_ITEM(op, i, NULL);
        return op;
    }
#endif
    op = (PyObject*)PyObject_GC_NewVar(PyTupleObject, tp, n);
    if (op == NULL)
        return NULL;
    for (i = unset; i < n; i++)
        PyTuple_SET_ITEM(op, i, NULL);
    return op;
}

static Py_ssize_t kc_rec_freelist_len(Py_ssize_t n)
{
#if KC_REC_FREELIST
    return (n >= 0 && n <= KC_REC_MAX_FIELDS) ? kc_rec_nfree[n] : 0;
#else
    (void)n;
    return 0;
#endif
}

/* Empties the free lists (the memory goes back to the allocator). */
static void kc_rec_freelist_clear(void)
{
#if KC_REC_FREELIST
    int n;
#if KC_OBJ_REUSE
    kc_obj_freelists_clear();
#endif
    while (kc_hdr_nfree > 0)
        Py_DECREF(kc_hdr_free[--kc_hdr_nfree]);
    for (n = 0; n <= KC_REC_MAX_FIELDS; n++)
        while (kc_rec_nfree[n] > 0)
            PyObject_GC_Del(kc_rec_free[n][--kc_rec_nfree[n]]);
#endif
}

/* A new heap type ``qualified_name`` ("module.Name"), a tuple subclass with one read-only
 * member per name in `fields` (a tuple of str), documented as namedtuple's getters are.  The
 * namedtuple methods (__new__, _make, _replace, ...) are added by the caller.  The names are
 * copied and live as long as the process (a type is made once per class). */
static PyObject* kc_record_type_new(const char* qualified_name, PyObject* fields)
{
    Py_ssize_t n, i;
    PyMemberDef* members = NULL;
    PyObject* bases = NULL;
    PyObject* result = NULL;
    char* name_copy = NULL;
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) > KC_REC_MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "a record type has at most %d fields", KC_REC_MAX_FIELDS);
        return NULL;
    }
    n = PyTuple_GET_SIZE(fields);
    members = (PyMemberDef*)PyMem_Calloc((size_t)n + 1, sizeof(PyMemberDef));
    name_copy = (char*)PyMem_Malloc(strlen(qualified_name) + 1);
    if (members == NULL || name_copy == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    strcpy(name_copy, qualified_name);
    for (i = 0; i < n; i++) {
        Py_ssize_t len;
        const char* s;
        char* copy;
        char doc[48];
        PyObject* f = PyTuple_GET_ITEM(fields, i);
        if (!PyUnicode_Check(f)) {
            PyErr_SetString(PyExc_TypeError, "record field names must be str");
            goto done;
        }
        s = PyUnicode_AsUTF8AndSize(f, &len);
        if (s == NULL)
            goto done;
        copy = (char*)PyMem_Malloc((size_t)len + 1);
        snprintf(doc, sizeof doc, "Alias for field number %zd", i);
        members[i].doc = (const char*)PyMem_Malloc(strlen(doc) + 1);
        if (copy == NULL || members[i].doc == NULL) {
            PyMem_Free(copy);
            PyErr_NoMemory();
            goto done;
        }
        memcpy(copy, s, (size_t)len + 1);
        strcpy((char*)members[i].doc, doc);
        members[i].name = copy;
        members[i].type = T_OBJECT_EX;
        members[i].offset = offsetof(PyTupleObject, ob_item) + (Py_ssize_t)sizeof(PyObject*) * i;
        members[i].flags = READONLY;
    }
    {
        PyType_Slot slots[] = {
            {Py_tp_dealloc, (void*)kc_rec_dealloc},
            {Py_tp_members, (void*)members},
            {0, NULL},
        };
        PyType_Spec spec = {name_copy, 0, 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, slots};
        bases = PyTuple_Pack(1, (PyObject*)&PyTuple_Type);
        if (bases == NULL)
            goto done;
        result = PyType_FromSpecWithBases(&spec, bases);
    }
done:
    Py_XDECREF(bases);
    if (result == NULL) {
        if (members != NULL) {
            for (i = 0; i < n; i++) {
                PyMem_Free((void*)members[i].name);
                PyMem_Free((void*)members[i].doc);
            }
        }
        PyMem_Free(members);
        PyMem_Free(name_copy);
    }
    /* On success the type refers to name_copy (tp_name) and to the member names and docs
       (its descriptors); they are kept for the life of the process. */
    return result;
}

#endif

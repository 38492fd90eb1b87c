# Consumer records made in C (kcore/consumerrecord.h) and the record types they are instances
# of (kcore/recordtype.h): declarations only, no module.
from cpython.object cimport PyObject, PyTypeObject

cdef extern from "recordtype.h":
    object kc_record_type_new(const char* qualified_name, object fields)
    Py_ssize_t kc_rec_freelist_len(Py_ssize_t n)
    void kc_rec_freelist_clear()

cdef extern from "consumerrecord.h":
    const Py_ssize_t KC_CONSUMER_FIELDS
    object kc_record_new(PyTypeObject* tp, Py_ssize_t n, object topic, object partition,
                         object epoch, long long offset, object ts, int ts_type,
                         const char* kp, Py_ssize_t klen, const char* vp, Py_ssize_t vlen,
                         PyObject* headers, long long hsize, int untrack,
                         PyObject* views, const char* vbase)
    # The same, its new reference not managed by Cython (for a caller that hands it on).
    PyObject* kc_record_new_ref "kc_record_new"(
        PyTypeObject* tp, Py_ssize_t n, object topic, object partition, object epoch,
        long long offset, object ts, int ts_type, const char* kp, Py_ssize_t klen,
        const char* vp, Py_ssize_t vlen, PyObject* headers, long long hsize, int untrack,
        PyObject* views, const char* vbase) except NULL
    void kc_gc_untrack(object o) noexcept
    bint kc_tuple_like(PyTypeObject* tp) noexcept
    bint kc_is_ascii(object s) noexcept

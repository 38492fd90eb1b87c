# cython: language_level=3
"""C-level interface of kcore.messages: the schema-driven message codec."""
from cpython.ref cimport PyObject
from libc.stdint cimport uint32_t
from kcore.wire cimport Reader, Writer

cdef enum:
    K_BOOL = 1
    K_INT8
    K_INT16
    K_UINT16
    K_INT32
    K_INT64
    K_FLOAT64
    K_UUID
    K_STRING
    K_BYTES
    K_RECORDS      # bytes on the wire, decoded as a zero-copy memoryview
    K_STRUCT
    K_ARRAY

cdef enum:
    D_SHARED = 0   # immutable default: hand out as is
    D_LIST = 1     # list default: hand out a copy
    D_STRUCT = 2   # struct default: build a fresh dict

ctypedef struct Op:
    int kind           # K_*
    int elem           # element kind of a K_ARRAY (K_STRUCT for struct arrays)
    bint nullable      # at this version
    bint tagged        # lives in the tagged-fields section at this version
    uint32_t tag
    int dflt_mode      # D_*
    Py_ssize_t elem_min   # fewest bytes one array element can take (bounds hostile counts)
    PyObject* key      # interned snake_case name (owned by Program._refs)
    PyObject* dflt     # default value / template (owned by Program._refs)
    PyObject* dflt_enc # encoded default of a tagged field (bytes), else NULL
    PyObject* sub      # Program of the struct / struct elements (owned by Program._refs)


cdef class Program:
    """One struct (or a whole message body) at one version, flattened into an Op array."""
    cdef Op* ops
    cdef Py_ssize_t n_ops
    cdef readonly bint flexible
    cdef readonly Py_ssize_t min_size
    cdef readonly str name
    cdef readonly int version
    cdef list _refs
    cdef list _tag_order          # op indices of tagged fields, ascending tag
    cdef frozenset _present       # field names at this version
    cdef dict _absent             # name -> schema Field for fields this version lacks
    cdef dict _tmpl               # default template (shared, read-only)
    cdef bint _flat_default       # every default immutable: make_default copies _tmpl

    cdef object decode_from(self, Reader r)
    cdef int encode_into(self, Writer w, object body) except -1
    cdef object make_default(self)


cpdef Program compile_message(object message, int version)

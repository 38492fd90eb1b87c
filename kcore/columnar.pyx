# cython: language_level=3
"""Columnar output of a decode: ColumnarBatch (contiguous arrays, no object per record) and
its conversion to a pyarrow.RecordBatch.

kcore.records.decode_columnar fills a ColumnarBatch's arrays (kcore.pool.CArray blocks);
this module only exposes them and gathers/views keys and values into Arrow's layouts.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int32_t, int64_t, uint8_t, INT32_MAX
from libc.string cimport memcpy, memset

from kcore.pool cimport CArray, new_carray

__all__ = ["ColumnarBatch"]


cdef int64_t gather(const uint8_t* data, const int64_t* pos, const int32_t* lens,
                    Py_ssize_t n, void* offsets, bint wide, uint8_t* out,
                    uint8_t* validity) noexcept nogil:
    """Copy variable-length values into Arrow layout; returns the null count."""
    cdef Py_ssize_t i
    cdef int64_t o = 0, nulls = 0
    cdef int32_t ln
    for i in range(n):
        if wide:
            (<int64_t*>offsets)[i] = o
        else:
            (<int32_t*>offsets)[i] = <int32_t>o
        ln = lens[i]
        if ln < 0:
            nulls += 1
            validity[i >> 3] &= ~(1 << (i & 7))
            continue
        validity[i >> 3] |= 1 << (i & 7)
        if ln:
            memcpy(out + o, data + pos[i], ln)
            o += ln
    if wide:
        (<int64_t*>offsets)[n] = o
    else:
        (<int32_t*>offsets)[n] = <int32_t>o
    return nulls


cdef int64_t make_views(const int64_t* pos, const int32_t* lens, Py_ssize_t n,
                        const uint8_t* data, uint8_t* views, uint8_t* validity) noexcept nogil:
    """Arrow binary_view entries pointing into `data` (buffer index 0): no value is copied."""
    cdef Py_ssize_t i
    cdef int64_t nulls = 0
    cdef int32_t ln, zero = 0
    cdef int32_t off32
    cdef uint8_t* v
    for i in range(n):
        v = views + 16 * i
        memset(v, 0, 16)
        ln = lens[i]
        if ln < 0:
            nulls += 1
            validity[i >> 3] &= ~(1 << (i & 7))
            continue
        validity[i >> 3] |= 1 << (i & 7)
        memcpy(v, &ln, 4)
        if ln <= 12:
            memcpy(v + 4, data + pos[i], ln)
        else:
            memcpy(v + 4, data + pos[i], 4)
            memcpy(v + 8, &zero, 4)
            off32 = <int32_t>pos[i]
            memcpy(v + 12, &off32, 4)
    return nulls


@cython.final
cdef class ColumnarBatch:
    """One partition's records as contiguous arrays (no Python object per record).

    Every array is a read-only buffer (memoryview / numpy.frombuffer / pa.py_buffer):
      offsets, timestamps (int64), timestamp_types (int8),
      key_offsets/value_offsets (int64) + key_lengths/value_lengths (int32, -1 = null),
      positions into `data`; header_starts (int32, num_records + 1): record i owns headers
      header_starts[i] .. header_starts[i+1]-1 of header_key_offsets/lengths (int32) and
      header_value_offsets/lengths (-1 = null).
    `data` is the caller's input itself when no batch was compressed (zero_copy), else one
    owned buffer holding every batch's (decompressed) records.
    """

    def __len__(self):
        return self.num_records

    @property
    def offsets(self):
        return memoryview(self._offsets)

    @property
    def timestamps(self):
        return memoryview(self._timestamps)

    @property
    def timestamp_types(self):
        return memoryview(self._ts_types)

    @property
    def key_offsets(self):
        return memoryview(self._key_pos)

    @property
    def key_lengths(self):
        return memoryview(self._key_len)

    @property
    def value_offsets(self):
        return memoryview(self._val_pos)

    @property
    def value_lengths(self):
        return memoryview(self._val_len)

    @property
    def header_starts(self):
        return memoryview(self._hdr_start)

    @property
    def header_key_offsets(self):
        return memoryview(self._hk_pos)

    @property
    def header_key_lengths(self):
        return memoryview(self._hk_len)

    @property
    def header_value_offsets(self):
        return memoryview(self._hv_pos)

    @property
    def header_value_lengths(self):
        return memoryview(self._hv_len)

    @property
    def data(self):
        return memoryview(self._data)

    def __repr__(self):
        return (f"ColumnarBatch(num_records={self.num_records}, batches={len(self.batches)}, "
                f"next_offset={self.next_offset}, zero_copy={self.zero_copy})")

    cdef object _binary(self, object pa, object posa_, object lena_, Py_ssize_t n,
                        bint view, object typ):
        cdef CArray posa = <CArray>posa_
        cdef CArray lena = <CArray>lena_
        cdef Py_buffer db
        cdef const int64_t* pos = <const int64_t*>posa.ptr
        cdef const int32_t* lens = <const int32_t*>lena.ptr
        cdef Py_ssize_t i
        cdef int64_t total = 0, nulls
        cdef bint wide
        cdef CArray valid, offs, out, views
        PyObject_GetBuffer(self._data, &db, PyBUF_SIMPLE)
        try:
            valid = new_carray((n + 7) // 8, 1, b"B")
            memset(valid.ptr, 0, valid.nbytes)
            if view and db.len <= INT32_MAX:
                views = new_carray(n, 16, b"B")
                with nogil:
                    nulls = make_views(pos, lens, n, <const uint8_t*>db.buf,
                                       <uint8_t*>views.ptr, <uint8_t*>valid.ptr)
                btype = pa.binary_view() if typ == pa.binary() else pa.string_view()
                return pa.Array.from_buffers(
                    btype, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(views),
                               pa.py_buffer(self._data)], null_count=nulls)
            with nogil:
                for i in range(n):
                    if lens[i] > 0:
                        total += lens[i]
            wide = total > INT32_MAX
            offs = new_carray(n + 1, 8 if wide else 4, b"q" if wide else b"i")
            out = new_carray(total, 1, b"B")
            with nogil:
                nulls = gather(<const uint8_t*>db.buf, pos, lens, n, offs.ptr, wide,
                               <uint8_t*>out.ptr, <uint8_t*>valid.ptr)
            if wide:
                typ = pa.large_binary() if typ == pa.binary() else pa.large_string()
            return pa.Array.from_buffers(
                typ, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offs),
                         pa.py_buffer(out)], null_count=nulls)
        finally:
            PyBuffer_Release(&db)

    def to_arrow(self, *, bint binary_view=False):
        """A pyarrow.RecordBatch: offset int64, timestamp int64, key binary, value binary,
        headers list<struct<key: string, value: binary>>.

        offset, timestamp and the headers' list offsets are zero-copy views of this batch's
        arrays.  Keys and values are gathered into Arrow's contiguous layout (one memcpy per
        value, GIL released), or with binary_view=True exposed as binary_view arrays that
        point straight into `data` (zero-copy; needs a consumer that reads binary_view).
        """
        import pyarrow as pa
        n = self.num_records
        nh = self.num_headers
        offset = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._offsets)])
        timestamp = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._timestamps)])
        key = self._binary(pa, self._key_pos, self._key_len, n, binary_view, pa.binary())
        value = self._binary(pa, self._val_pos, self._val_len, n, binary_view, pa.binary())
        hkey = self._binary(pa, self._hk_pos, self._hk_len, nh, False, pa.string())
        try:
            hkey.validate(full=True)
        except pa.ArrowInvalid:
            # Malformed UTF-8 in a header key: decode like the per-record path (U+FFFD).
            raw = self._binary(pa, self._hk_pos, self._hk_len, nh, False, pa.binary())
            hkey = pa.array([b.decode("utf-8", "replace") for b in raw.to_pylist()],
                            pa.string())
        hval = self._binary(pa, self._hv_pos, self._hv_len, nh, binary_view, pa.binary())
        struct_type = pa.struct([pa.field("key", hkey.type, nullable=False),
                                 pa.field("value", hval.type)])
        entries = pa.StructArray.from_arrays([hkey, hval], fields=list(struct_type))
        headers = pa.Array.from_buffers(pa.list_(struct_type), n,
                                        [None, pa.py_buffer(self._hdr_start)],
                                        children=[entries])
        schema = pa.schema([
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("key", key.type),
            pa.field("value", value.type),
            pa.field("headers", headers.type, nullable=False),
        ])
        return pa.RecordBatch.from_arrays([offset, timestamp, key, value, headers],
                                          schema=schema)

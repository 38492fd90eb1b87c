# cython: language_level=3
"""Schema-driven codec for Kafka message bodies.

``compile_message(message, version)`` flattens a message description at one version into a
``Program``: a C array of ops (one per field present at that version), each with its kind,
nullability, tag, interned snake_case key, default and, for structs, the nested Program.
The description is any object shaped like ``MessageSpec`` (its fields like ``FieldSpec``):
kcore reads those attributes and methods only, so it needs no schema classes of its own. Encoding and decoding interpret that array; no per-field Python code runs
and no schema object is consulted on the hot path. Programs are cached per (message, version).

Semantics (the Java client's, where it has one):
* Flexible versions use compact strings/bytes/arrays (uvarint length + 1, 0 = null) and end
  every struct with a tagged-fields section. Schema fields tagged at the version are read
  from it (missing ones take their default); unknown tags are skipped. On encode a tagged
  field is written only if its encoding differs from its default's, in ascending tag order.
* A nullable struct carries an int8 marker (-1 null, 1 present) before its fields.
* Decoding returns exactly the fields present at the version: a dict per struct, a list per
  array, ``str``/``bytes``/``int``/``bool``/``float``/``uuid.UUID``, and for "records" a
  zero-copy ``memoryview`` slice of the input (or None).
* Encoding: an omitted field takes its default. A key naming a field this version lacks is
  dropped if its value is the default or the field is ``ignorable``; otherwise
  UnsupportedVersionError (the Java client's "non-default field at version N" rule), so a
  feature the broker cannot receive is never silently lost. A key that is no field of the
  struct at any version raises IllegalArgumentError, as do values of the wrong type or
  range (the message names the struct and field).
* Decoding errors are kcore.errors.ProtocolError subclasses: BufferUnderflowError for
  truncation, InvalidLengthError for negative / impossible lengths and counts (checked
  against the bytes left before anything is allocated), VarintError, ProtocolError for bad
  UTF-8. Trailing bytes after a body are ignored unless ``exact`` is asked for.
"""
import sys
import uuid as _uuid_mod
from typing import Protocol, runtime_checkable

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem, PyDict_Check, PyDict_Copy
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport PyObject, Py_INCREF
from libc.stdint cimport int16_t, int32_t, uint32_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset

from kcore.wire cimport Reader, Writer, raise_invalid_length
from kcore.frames cimport (write_request_header, read_request_header, write_response_header,
                           read_response_header)

from kcore.errors import (IllegalArgumentError, InvalidLengthError, ProtocolError,
                            UnsupportedVersionError)

__all__ = ["FieldSpec", "MessageSpec", "Program", "compile_message", "encode", "decode",
           "encode_request_frame", "encode_response_frame", "decode_response_frame",
           "decode_request_frame"]


# ------------------------------------------------------------------ what a schema must offer
# The codec only reads these members (at compile time, never per message), so any schema
# classes with them work; runtime_checkable lets a caller's test assert the fit.
@runtime_checkable
class FieldSpec(Protocol):
    """One field of a message or struct, as compile_message reads it.

    Attributes: name (snake_case key), type ("int32", "[]int32", "[]Name", "Name", ...),
    tag (tagged-field number or None), default (None: the type's zero value),
    fields (the members of a struct or []struct type), ignorable (may be dropped when a
    version lacks the field).
    """

    name: str
    type: str
    tag: object
    default: object
    fields: object
    ignorable: bool

    def in_version(self, v): ...
    def nullable_in(self, v): ...
    def tagged_in(self, v): ...

    @property
    def is_array(self): ...

    @property
    def element_type(self): ...

    @property
    def is_struct(self): ...


@runtime_checkable
class MessageSpec(Protocol):
    """A request or response body, as compile_message reads it.

    Attributes: name, valid_versions (text for error messages), fields (FieldSpec objects).
    """

    name: str
    valid_versions: str
    fields: object

    def versions(self): ...
    def is_flexible(self, v): ...


cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)

cdef object _UUID = _uuid_mod.UUID
cdef object _ZERO_UUID = _uuid_mod.UUID(int=0)

cdef dict _PRIM_KINDS = {
    "bool": K_BOOL, "int8": K_INT8, "int16": K_INT16, "uint16": K_UINT16, "int32": K_INT32,
    "int64": K_INT64, "float64": K_FLOAT64, "uuid": K_UUID, "string": K_STRING,
    "bytes": K_BYTES, "records": K_RECORDS,
}
cdef dict _ZEROS = {
    K_BOOL: False, K_INT8: 0, K_INT16: 0, K_UINT16: 0, K_INT32: 0, K_INT64: 0,
    K_FLOAT64: 0.0, K_UUID: _ZERO_UUID, K_STRING: "", K_BYTES: b"", K_RECORDS: b"",
}

cdef dict _cache = {}


cdef Py_ssize_t _prim_min(int kind, bint flexible):
    if kind == K_BOOL or kind == K_INT8:
        return 1
    if kind == K_INT16 or kind == K_UINT16:
        return 2
    if kind == K_INT32:
        return 4
    if kind == K_INT64 or kind == K_FLOAT64:
        return 8
    if kind == K_UUID:
        return 16
    if kind == K_STRING:
        return 1 if flexible else 2
    return 1 if flexible else 4          # bytes, records


# ------------------------------------------------------------------ compilation (cold)
cdef class Program:
    def __dealloc__(self):
        free(self.ops)
        self.ops = NULL

    def __repr__(self):
        return (f"<Program {self.name} v{self.version} fields={self.n_ops} "
                f"flexible={bool(self.flexible)}>")

    @property
    def field_names(self):
        return [<object>self.ops[i].key for i in range(self.n_ops)]

    cdef object decode_from(self, Reader r):
        return _decode_struct(self, r)

    cdef int encode_into(self, Writer w, object body) except -1:
        return _encode_struct(self, w, body)

    cdef object make_default(self):
        if self._flat_default:
            return PyDict_Copy(self._tmpl)
        cdef dict d = _PyDict_NewPresized(self.n_ops)
        cdef Py_ssize_t i
        for i in range(self.n_ops):
            PyDict_SetItem(d, <object>self.ops[i].key, _fresh_default(&self.ops[i]))
        return d

    def default(self):
        """A fresh dict holding every field's default at this version."""
        return self.make_default()

    def decode(self, data, bint exact=False):
        """Decode a body (no header) from a bytes-like object."""
        cdef Reader r = Reader(data)
        d = _decode_struct(self, r)
        if exact and r.pos != r.end:
            raise ProtocolError(f"{self.name} v{self.version}: {r.end - r.pos} trailing bytes")
        return d

    def encode(self, body=None):
        """Encode a body (no header) to bytes."""
        cdef Writer w = Writer(256)
        _encode_struct(self, w, {} if body is None else body)
        return w.getvalue_c()


cdef object _default_for(object f, int kind, bint nullable, Program sub):
    """(default, mode) of a field at a version; see schema.Field.default."""
    d = f.default
    if kind == K_ARRAY:
        if d is None:
            return (None, D_SHARED) if nullable else ([], D_LIST)
        return list(d), D_LIST
    if kind == K_STRUCT:
        if d is None and nullable:
            return None, D_SHARED
        return sub._tmpl, D_STRUCT
    if d is None:
        return (None if nullable else _ZEROS[kind]), D_SHARED
    if kind == K_UUID and not isinstance(d, _UUID):
        d = _UUID(d) if isinstance(d, str) else _UUID(bytes=bytes(d))
    return d, D_SHARED


cdef dict _template(Program p):
    """Default dict used when encoding an omitted struct (read-only, shared)."""
    cdef dict d = {}
    cdef Py_ssize_t i
    for i in range(p.n_ops):
        PyDict_SetItem(d, <object>p.ops[i].key, <object>p.ops[i].dflt)
    return d


cdef int _prim_kind(str type_name, str where) except -1:
    k = _PRIM_KINDS.get(type_name)
    if k is None:
        raise ValueError(f"{where}: unknown primitive type {type_name!r}")
    return k


cdef Program _compile_struct(str name, list fields, int v, bint flexible):
    cdef Program p = Program.__new__(Program)
    cdef Op* op
    cdef Program sub
    cdef Py_ssize_t i, field_min
    cdef Writer w
    p.name = name
    p.version = v
    p.flexible = flexible
    p._refs = []
    present = [f for f in fields if f.in_version(v)]
    p._present = frozenset(f.name for f in present)
    p._absent = {f.name: f for f in fields if not f.in_version(v)}
    if len(p._present) != len(present):
        raise ValueError(f"{name} v{v}: duplicate field names")
    p.n_ops = len(present)
    p.ops = <Op*>malloc(max(1, p.n_ops) * sizeof(Op))
    if p.ops == NULL:
        raise MemoryError()
    memset(p.ops, 0, max(1, p.n_ops) * sizeof(Op))
    cdef Py_ssize_t min_size = 1 if flexible else 0     # the tagged-fields count
    tagged = []
    for i, f in enumerate(present):
        op = &p.ops[i]
        where = f"{name}.{f.name}"
        nullable = f.nullable_in(v)
        sub = None
        if f.is_struct:
            if not f.fields:
                raise ValueError(f"{where}: unknown type {f.type!r} (a struct without fields)")
            sub = _compile_struct(f.element_type, list(f.fields), v, flexible)
            p._refs.append(sub)
            op.sub = <PyObject*>sub
        if f.is_array:
            op.kind = K_ARRAY
            if f.is_struct:
                op.elem = K_STRUCT
                op.elem_min = sub.min_size
            else:
                op.elem = _prim_kind(f.element_type, where)
                op.elem_min = _prim_min(op.elem, flexible)
            field_min = 1 if flexible else 4
        elif f.is_struct:
            op.kind = K_STRUCT
            field_min = 1 if nullable else sub.min_size
        else:
            op.kind = _prim_kind(f.type, where)
            field_min = _prim_min(op.kind, flexible)
        op.nullable = nullable
        key = sys.intern(str(f.name))
        p._refs.append(key)
        op.key = <PyObject*>key
        dflt, mode = _default_for(f, op.kind, nullable, sub)
        p._refs.append(dflt)
        op.dflt = <PyObject*>dflt
        op.dflt_mode = mode
        if flexible and f.tagged_in(v):
            if f.tag is None or f.tag < 0:
                raise ValueError(f"{where}: tagged field without a tag number")
            op.tagged = True
            op.tag = f.tag
            tagged.append((f.tag, i))
        else:
            min_size += field_min
    if len({t for t, _ in tagged}) != len(tagged):
        raise ValueError(f"{name} v{v}: duplicate tags")
    p._tag_order = [i for _, i in sorted(tagged)]
    p.min_size = min_size
    p._tmpl = _template(p)
    p._flat_default = all(p.ops[i].dflt_mode == D_SHARED for i in range(p.n_ops))
    for i in p._tag_order:
        w = Writer(32)
        _encode_value(&p.ops[i], w, <object>p.ops[i].dflt, True)
        enc = w.getvalue_c()
        p._refs.append(enc)
        p.ops[i].dflt_enc = <PyObject*>enc
    return p


cpdef Program compile_message(object message, int version):
    """The cached Program for ``message`` (a schema.Message) at ``version``."""
    key = (id(message), version)
    hit = _cache.get(key)
    if hit is not None and (<tuple>hit)[0] is message:
        return (<tuple>hit)[1]
    if version not in message.versions():
        raise UnsupportedVersionError(
            f"{message.name} version {version} is outside {message.valid_versions}")
    prog = _compile_struct(message.name, list(message.fields), version,
                           message.is_flexible(version))
    _cache[key] = (message, prog)      # holding message keeps id() unique
    return prog


# ------------------------------------------------------------------ decoding (hot)
cdef inline object _fresh_default(Op* op):
    if op.dflt_mode == D_SHARED:
        return <object>op.dflt
    if op.dflt_mode == D_LIST:
        return list(<list>op.dflt)
    return (<Program>op.sub).make_default()


cdef object _read_prim(Reader r, int kind, bint flexible, bint nullable):
    cdef Py_ssize_t n
    if kind == K_INT32:
        return r.read_int32()
    elif kind == K_INT64:
        return r.read_int64()
    elif kind == K_INT16:
        return r.read_int16()
    elif kind == K_STRING:
        # Read every string as nullable: brokers in the field send null where the schema
        # forbids it (librdkafka's mock cluster: FindCoordinator error replies carry a null
        # host). Rejecting the whole response would hide the error code the caller needs.
        s = r.read_compact_nullable_string() if flexible else r.read_nullable_string()
        if s is None and not nullable:
            return ""
        return s
    elif kind == K_RECORDS:
        n = r.read_compact_bytes_len(nullable) if flexible else r.read_bytes_len(nullable)
        if n < 0:
            return None
        return r.read_view(n)
    elif kind == K_INT8:
        return r.read_int8()
    elif kind == K_BOOL:
        return r.read_bool()
    elif kind == K_UUID:
        return r.read_uuid()
    elif kind == K_BYTES:
        # As for strings: tolerate a null where the schema forbids one (the mock cluster's
        # SyncGroup error replies carry a null assignment).
        n = r.read_compact_bytes_len(True) if flexible else r.read_bytes_len(True)
        if n < 0:
            return None if nullable else b""
        return r.read_raw(n)
    elif kind == K_UINT16:
        return r.read_uint16()
    elif kind == K_FLOAT64:
        return r.read_float64()
    raise ProtocolError(f"unknown field kind {kind}")


cdef object _decode_array(Op* op, Reader r, bint flexible):
    cdef Py_ssize_t n, i
    cdef Program sub
    cdef int elem = op.elem
    if flexible:
        n = r.read_compact_array_len(op.elem_min)
    else:
        n = r.read_array_len(op.elem_min)
    if n < 0:
        if op.nullable:
            return None
        raise InvalidLengthError(f"array {<object>op.key!r} is null but not nullable here")
    cdef list out = PyList_New(n)     # n is bounded by the bytes left (read_*array_len)
    if elem == K_STRUCT:
        sub = <Program>op.sub
        for i in range(n):
            v = _decode_struct(sub, r)
            Py_INCREF(v)
            PyList_SET_ITEM(out, i, v)
    else:
        for i in range(n):
            v = _read_prim(r, elem, flexible, False)
            Py_INCREF(v)
            PyList_SET_ITEM(out, i, v)
    return out


cdef object _decode_value(Op* op, Reader r, bint flexible):
    cdef int kind = op.kind
    if kind == K_ARRAY:
        return _decode_array(op, r, flexible)
    if kind == K_STRUCT:
        if op.nullable and r.read_int8() < 0:
            return None
        return _decode_struct(<Program>op.sub, r)
    return _read_prim(r, kind, flexible, op.nullable)


cdef int _decode_tagged(Program p, Reader r, dict d) except -1:
    cdef uint32_t count = r.read_uvarint()
    cdef uint32_t k, tag, size
    cdef Py_ssize_t field_end, saved_end, j, n_tagged
    cdef Op* op
    if count == 0:
        return 0
    if <Py_ssize_t>count * 2 > r.end - r.pos:          # a tagged field takes >= 2 bytes
        raise_invalid_length("tagged field count", count, r.end - r.pos)
    n_tagged = len(p._tag_order)
    for k in range(count):
        tag = r.read_uvarint()
        size = r.read_uvarint()
        r.need(size)
        field_end = r.pos + size
        op = NULL
        for j in range(n_tagged):
            if p.ops[<Py_ssize_t>p._tag_order[j]].tag == tag:
                op = &p.ops[<Py_ssize_t>p._tag_order[j]]
                break
        if op == NULL:
            r.pos = field_end                  # unknown tag: skip
            continue
        saved_end = r.end
        r.end = field_end                      # the value may not read past its size
        v = _decode_value(op, r, True)
        r.end = saved_end
        r.pos = field_end
        PyDict_SetItem(d, <object>op.key, v)
    return 0


cdef object _decode_struct(Program p, Reader r):
    cdef dict d = _PyDict_NewPresized(p.n_ops)
    cdef Op* op = p.ops
    cdef Op* stop = p.ops + p.n_ops
    cdef bint flexible = p.flexible
    cdef int kind
    while op < stop:
        kind = op.kind
        if op.tagged:
            v = _fresh_default(op)
        elif kind == K_ARRAY:
            v = _decode_array(op, r, flexible)
        elif kind == K_STRUCT:
            if op.nullable and r.read_int8() < 0:
                v = None
            else:
                v = _decode_struct(<Program>op.sub, r)
        else:
            v = _read_prim(r, kind, flexible, op.nullable)
        PyDict_SetItem(d, <object>op.key, v)
        op += 1
    if flexible:
        _decode_tagged(p, r, d)
    return d


# ------------------------------------------------------------------ encoding
cdef int _write_prim(Writer w, int kind, object value, bint flexible, bint nullable) except -1:
    if kind == K_STRING:
        if flexible:
            if nullable:
                return w.write_compact_nullable_string(value)
            return w.write_compact_string(value)
        if nullable:
            return w.write_nullable_string(value)
        return w.write_string(value)
    if value is None:
        if kind == K_BYTES or kind == K_RECORDS:
            if not nullable:
                raise TypeError("None for a non-nullable bytes field")
            return w.write_uvarint(0) if flexible else w.write_int32(-1)
        raise TypeError("None for a non-nullable field")
    if kind == K_INT32:
        return w.write_int32(value)
    elif kind == K_INT64:
        return w.write_int64(value)
    elif kind == K_INT16:
        return w.write_int16(value)
    elif kind == K_INT8:
        return w.write_int8(value)
    elif kind == K_BOOL:
        return w.write_bool(value)
    elif kind == K_UINT16:
        return w.write_uint16(value)
    elif kind == K_FLOAT64:
        return w.write_float64(value)
    elif kind == K_UUID:
        return w.write_uuid(value)
    elif kind == K_BYTES or kind == K_RECORDS:
        return w.write_compact_bytes(value) if flexible else w.write_bytes(value)
    raise ValueError(f"unknown field kind {kind}")


cdef int _encode_value(Op* op, Writer w, object value, bint flexible) except -1:
    cdef int kind = op.kind
    cdef Py_ssize_t n, i
    cdef Program sub
    if kind == K_ARRAY:
        if value is None:
            if not op.nullable:
                raise TypeError("None for a non-nullable array")
            return w.write_compact_array_len(-1) if flexible else w.write_array_len(-1)
        if isinstance(value, (str, bytes, bytearray, memoryview, dict)):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        seq = value if isinstance(value, (list, tuple)) else list(value)
        n = len(seq)
        if n > 0x7fffffff:
            raise OverflowError("array longer than 2**31-1")
        if flexible:
            w.write_compact_array_len(n)
        else:
            w.write_array_len(n)
        if op.elem == K_STRUCT:
            sub = <Program>op.sub
            for item in seq:
                _encode_struct(sub, w, item)
        else:
            for item in seq:
                _write_prim(w, op.elem, item, flexible, False)
        return 0
    if kind == K_STRUCT:
        if value is None:
            if not op.nullable:
                raise TypeError("None for a non-nullable struct")
            return w.write_int8(-1)
        if op.nullable:
            w.write_int8(1)
        return _encode_struct(<Program>op.sub, w, value)
    return _write_prim(w, kind, value, flexible, op.nullable)


cdef bint _is_default_value(object f, object v):
    """Whether v is the default of schema field f (for fields a version lacks)."""
    if v is None:
        return True
    if f.is_array:
        return len(v) == 0 if f.default is None else list(v) == list(f.default)
    if f.is_struct:
        if not isinstance(v, dict):
            return False
        by_name = {sf.name: sf for sf in f.fields}
        return all(k in by_name and _is_default_value(by_name[k], x) for k, x in v.items())
    if f.default is not None:
        return v == f.default
    if f.type == "uuid":
        return v == _ZERO_UUID or (not isinstance(v, _UUID) and bytes(v) == bytes(16))
    if f.type in ("bytes", "records"):
        return len(v) == 0
    return v == _ZEROS[_PRIM_KINDS[f.type]]


cdef int _check_extra(Program p, dict body) except -1:
    for k, v in body.items():
        if k in p._present:
            continue
        f = p._absent.get(k)
        if f is None:
            raise IllegalArgumentError(f"{p.name} v{p.version} has no field {k!r}")
        if not f.ignorable and not _is_default_value(f, v):
            raise UnsupportedVersionError(
                f"{p.name} v{p.version} has no field {k!r}: cannot send the non-default "
                f"value {v!r} at this version")
    return 0


cdef int _encode_tagged(Program p, Writer w, dict body) except -1:
    cdef Op* op
    cdef PyObject* vp
    cdef Writer tmp
    if not p._tag_order:
        return w.write_uvarint(0)
    entries = []
    for i in p._tag_order:
        op = &p.ops[<Py_ssize_t>i]
        vp = PyDict_GetItem(body, <object>op.key)
        if vp == NULL:
            continue
        tmp = Writer(64)
        _encode_value(op, tmp, <object>vp, True)
        enc = tmp.getvalue_c()
        if enc == <bytes>op.dflt_enc:          # equal to the default: not written
            continue
        entries.append((op.tag, enc))
    w.write_uvarint(len(entries))
    for tag, enc in entries:
        w.write_uvarint(<uint32_t>tag)
        w.write_uvarint(len(<bytes>enc))       # the size is not +1 (unlike compact bytes)
        w.write_buffer(enc)
    return 0


cdef int _encode_struct(Program p, Writer w, object body) except -1:
    cdef Op* op
    cdef PyObject* vp
    cdef Py_ssize_t i = 0, found = 0
    cdef bint flexible = p.flexible
    if not PyDict_Check(body):
        if body is None:
            raise IllegalArgumentError(f"{p.name}: expected a dict, got None")
        try:
            body = dict(body)
        except (TypeError, ValueError):
            raise IllegalArgumentError(
                f"{p.name}: expected a dict, got {type(body).__name__}") from None
    try:
        while i < p.n_ops:
            op = &p.ops[i]
            vp = PyDict_GetItem(body, <object>op.key)
            if vp != NULL:
                found += 1
            if not op.tagged:
                _encode_value(op, w, <object>op.dflt if vp == NULL else <object>vp, flexible)
            i += 1
        if flexible:
            i = -1
            _encode_tagged(p, w, <dict>body)
    except (TypeError, OverflowError, ValueError) as exc:
        if isinstance(exc, IllegalArgumentError):
            raise
        where = "tagged fields" if i < 0 else repr(<object>p.ops[i].key)
        raise IllegalArgumentError(f"{p.name} v{p.version} field {where}: {exc}") from exc
    if found != len(<dict>body):
        _check_extra(p, <dict>body)
    return 0


# ------------------------------------------------------------------ whole frames
def encode(message, int version, body=None):
    """Encode a body dict (no header) of schema.Message ``message`` at ``version``."""
    return compile_message(message, version).encode(body)


def decode(message, int version, data, bint exact=False):
    """Decode a body (no header) of schema.Message ``message`` at ``version``."""
    return compile_message(message, version).decode(data, exact)


def encode_request_frame(Program prog, int16_t api_key, int16_t api_version,
                         int32_t correlation_id, client_id, body, int header_version):
    """Size prefix + request header + body."""
    cdef Writer w = Writer(256)
    cdef Py_ssize_t at = w.reserve(4)
    write_request_header(w, api_key, api_version, correlation_id, client_id, header_version)
    _encode_struct(prog, w, {} if body is None else body)
    if w.pos - 4 > 0x7fffffff:
        raise IllegalArgumentError("request larger than 2**31-1 bytes")
    w.patch_int32(at, <int32_t>(w.pos - 4))
    return w.getvalue_c()


def encode_response_frame(Program prog, int32_t correlation_id, body, int header_version):
    """Size prefix + response header + body."""
    cdef Writer w = Writer(256)
    cdef Py_ssize_t at = w.reserve(4)
    write_response_header(w, correlation_id, header_version)
    _encode_struct(prog, w, {} if body is None else body)
    if w.pos - 4 > 0x7fffffff:
        raise IllegalArgumentError("response larger than 2**31-1 bytes")
    w.patch_int32(at, <int32_t>(w.pos - 4))
    return w.getvalue_c()


def decode_response_frame(Program prog, frame, int header_version, bint exact=False):
    """Body dict of a response frame given without its size prefix."""
    cdef Reader r = Reader(frame)
    read_response_header(r, header_version)
    d = _decode_struct(prog, r)
    if exact and r.pos != r.end:
        raise ProtocolError(f"{prog.name} v{prog.version}: {r.end - r.pos} trailing bytes")
    return d


def decode_request_frame(Program prog, frame, int header_version):
    """(api_key, api_version, correlation_id, client_id, body) of a request frame given
    without its size prefix."""
    cdef Reader r = Reader(frame)
    hdr = read_request_header(r, header_version)
    return hdr + (_decode_struct(prog, r),)

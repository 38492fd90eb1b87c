"""Fuzz targets for ``python -m bench fuzz``: every decoder that reads bytes from the network.

Each target is a ``Target``: ``run(data)`` feeds one input to the decoder, ``expected`` are
the exception classes its documentation names for bad input (anything else raised is a
finding), and ``seeds()`` builds valid inputs with the project's own encoders so the fuzzer
starts from realistic bytes.

Where a decoder takes options as well as bytes, the first byte of the input selects them
(a version, flags, a chunk size); the seeds carry that byte too. Nothing here is imported by
kclient; the modules under test are imported inside ``load()`` so that the fuzz child can
instrument kclient's Python modules before they are first imported.

Expected errors, per the documentation each target cites:

- kcore.records (decode_records / decode_consumer_records / decode_columnar): the module
  docstring lists CrcMismatchError, InvalidRecordLengthError, RecordVarintError,
  UnsupportedCodecError, DecompressionError, DecompressionLimitError, "CorruptRecordError
  (base class of all of these: catch it to handle every corrupt-data case)".
- kcore.messages / kclient.protocol.decode_response: "Decoding errors are
  kcore.errors.ProtocolError subclasses".
- kcore.wire.Reader: BufferUnderflowError, InvalidLengthError, VarintError (ProtocolError).
- kcore.frames: InvalidLengthError / FrameTooLargeError (ProtocolError) on a bad size prefix;
  FrameReceiver also KafkaConnectionError at end of stream.
- kcore.compression.decompress: DecompressionLimitError, DecompressionError,
  UnsupportedCodecError (all CorruptRecordError).
- kcore.groupcodec decoders: "ValueError names what is wrong".
- kclient.group.classic_embedded_protocol: "Hostile input raises a ProtocolError subclass".
- kclient.group.assignors.sticky.decode_sticky_user_data: never raises ("unreadable data
  counts as owning nothing").
- kclient.network.sasl.ScramMechanism.step: AuthenticationFailedError.
"""
from __future__ import annotations

import base64
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

_U32 = struct.Struct(">I")

# A fixed client nonce: the SCRAM target's seeds must extend it.
SCRAM_NONCE = "fuzz-client-nonce-0123456789"
# Decompression bound of the record and codec targets: keeps a bomb cheap (the default policy
# is exercised too, on one flag bit of the record targets).
SMALL_BOUND = 1 << 20


@dataclass
class Target:
    name: str
    description: str
    run: Callable[[bytes], None]
    expected: Callable[[], tuple[type[BaseException], ...]]
    seeds: Callable[[], list[bytes]]
    # Python packages worth instrumenting for coverage (kcore is compiled: atheris cannot see
    # inside it, the fuzzer mutates its inputs without coverage feedback from it).
    instrument: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- seed helpers
def _sample_records(n: int = 6) -> list[tuple]:
    return [(None, 1_700_000_000_000 + i, b"key-%d" % i if i % 3 else None,
             (b"value-%d " % i) * (1 + i % 4), [("h%d" % i, b"x" * i), ("n", None)] if i % 2 else [])
            for i in range(n)]


def _legacy_message(offset: int, magic: int, key: bytes | None, value: bytes | None, *,
                    attributes: int = 0, timestamp: int = 0) -> bytes:
    """One message-format v0/v1 entry (offset, size, crc32, magic, attributes, [timestamp],
    key, value): brokers still return these for data written before a format upgrade."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    msg = _U32.pack(zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def record_seeds() -> list[bytes]:
    """Record-batch bytes as a Fetch response carries them (without the flag byte)."""
    from kcore import compression as C
    from kcore import records as R
    recs = _sample_records()
    out = [R.encode_batch(recs, base_offset=100, codec=codec) for codec in range(5)]
    out.append(R.encode_batch(recs[:2], producer_id=4, producer_epoch=1, transactional=True,
                              base_offset=5))
    key, value = R.control_record(0, 3)
    out.append(R.encode_batch([(None, 9, key, value, [])], control=True, transactional=True,
                              producer_id=4, base_offset=7))
    out.append(R.encode_batch([(None, 1, None, b"", [])], timestamp_type=1, max_timestamp=9,
                              has_delete_horizon=True))
    inner = b"".join(_legacy_message(i, 1, b"k", b"inner-%d" % i, timestamp=i) for i in range(3))
    out.append(_legacy_message(3, 0, b"k", b"v0") + _legacy_message(4, 1, None, b"v1", timestamp=10))
    for codec in (1, 2, 3):
        out.append(_legacy_message(20, 1, None, C.compress(codec, inner), attributes=codec,
                                   timestamp=50))
    out.append(out[0] + out[5] + out[6])
    big = R.encode_batch(recs * 3, base_offset=1, codec=0)
    out.append(big[: len(big) // 2])                      # a batch cut by the fetch size
    return out


def _with_prefix(prefixes: list[int], payloads: list[bytes]) -> list[bytes]:
    return [bytes([p]) + d for p in prefixes for d in payloads]


# --------------------------------------------------------------------------- kcore.records
def _record_options(flags: int) -> dict[str, Any]:
    """Bit 0 check_crcs, bit 1 skip_control, bit 2 read_committed with two aborted
    transactions, bits 3-4 fetch_offset, bit 7 the default decompression policy."""
    opts: dict[str, Any] = {
        "check_crcs": bool(flags & 1),
        "max_decompressed_bytes": None if flags & 0x80 else SMALL_BOUND,
        "fetch_offset": (-1, 0, 6, 101)[(flags >> 3) & 3],
    }
    if flags & 4:
        opts["aborted_transactions"] = [(4, 0), (5, 2)]
    return opts


def _run_records(data: bytes) -> None:
    from kcore.records import decode_records
    if not data:
        return
    opts = _record_options(data[0])
    out = decode_records(data[1:], skip_control=bool(data[0] & 2), topic="t", partition=1, **opts)
    for r in out.records:
        _ = (r.offset, r.timestamp, r.key, r.value, r.headers, r.control_type)
    for b in out.batches:
        _ = (b.base_offset, b.last_offset, b.record_start, b.record_end, b.control_type)
    assert out.bytes_consumed + out.partial_trailing_bytes == len(data) - 1, "byte accounting"


def _run_consumer_records(data: bytes) -> None:
    from kclient.structs import ConsumerRecord
    from kcore.records import decode_consumer_records
    if not data:
        return
    opts = _record_options(data[0])
    out = decode_consumer_records(data[1:], ConsumerRecord, "t", 1, gc_untrack=bool(data[0] & 2), **opts)
    for r in out.records:
        assert isinstance(r, ConsumerRecord)


def _run_columnar(data: bytes) -> None:
    from kcore.records import decode_columnar
    if not data:
        return
    opts = _record_options(data[0])
    cols = decode_columnar(data[1:], skip_control=bool(data[0] & 2), **opts)
    n, size = cols.num_records, len(cols.data)
    # Every position must lie inside `data`: a view past it would read foreign memory.
    for offsets, lengths in ((cols.key_offsets, cols.key_lengths), (cols.value_offsets, cols.value_lengths),
                             (cols.header_key_offsets, cols.header_key_lengths),
                             (cols.header_value_offsets, cols.header_value_lengths)):
        for off, length in zip(offsets.tolist(), lengths.tolist()):
            assert length == -1 or (length >= 0 and 0 <= off and off + length <= size), "position outside data"
    starts = cols.header_starts.tolist()
    assert len(starts) == n + 1 and starts[0] == 0 and starts[-1] == cols.num_headers, "header_starts"
    assert all(a <= b for a, b in zip(starts, starts[1:])), "header_starts not monotonic"
    if data[0] & 0x40 and _pyarrow_available():
        cols.to_arrow(binary_view=bool(data[0] & 0x20))
    if data[0] & 2 and n:
        # The consumer's records from these columns: views (zero.copy.records) hold the same
        # bytes as copies, whatever the input.
        from kclient.structs import ConsumerRecord
        from kcore.records import consumer_records
        copies = consumer_records(cols, ConsumerRecord, "t", 1, 0, n)
        views = consumer_records(cols, ConsumerRecord, "t", 1, 0, n, views=True)
        del cols
        assert views == copies, "views differ from copies"


_PYARROW: bool | None = None


def _pyarrow_available() -> bool:
    global _PYARROW
    if _PYARROW is None:
        try:
            import pyarrow  # noqa: F401
            _PYARROW = True
        except ImportError:
            _PYARROW = False
    return _PYARROW


def _records_expected() -> tuple[type[BaseException], ...]:
    from kcore.errors import CorruptRecordError
    return (CorruptRecordError,)


# --------------------------------------------------------------------------- kcore.wire
_READER_OPS = ["int8", "boolean", "int16", "uint16", "int32", "uint32", "int64", "float64",
               "uvarint", "uvarlong", "varint", "varlong", "string", "nullable_string",
               "compact_string", "compact_nullable_string", "bytes", "nullable_bytes",
               "compact_bytes", "compact_nullable_bytes", "uuid", "tagged_fields", "skip_tagged",
               "array_len", "compact_array_len", "raw", "view", "skip_bytes"]
_READER_ARG_OPS = {"array_len", "compact_array_len", "raw", "view", "skip_bytes"}


def _run_wire(data: bytes) -> None:
    """Byte 0: number of op bytes (low 5 bits) and whether the reader starts at an offset
    (bit 5); then the op bytes (an op taking an argument takes the next op byte); then the
    buffer the reader reads."""
    from kcore import wire
    from kcore.errors import ProtocolError
    if not data:
        return
    nops = data[0] & 31
    ops, buf_start = data[1:1 + nops], min(1 + nops, len(data))
    if data[0] & 32:
        r = wire.Reader(data, buf_start, len(data))       # absolute positions inside the whole input
    else:
        r = wire.Reader(memoryview(data)[buf_start:])
    i = 0
    try:
        while i < len(ops):
            name = _READER_OPS[ops[i] % len(_READER_OPS)]
            i += 1
            if name in _READER_ARG_OPS:
                arg = ops[i] if i < len(ops) else 0
                i += 1
                if name in ("array_len", "compact_array_len"):
                    getattr(r, name)(1 + arg % 16)
                else:
                    getattr(r, name)(arg)
            else:
                getattr(r, name)()
            assert buf_start <= r.pos <= r.end == len(data) or not data[0] & 32, "reader left its window"
    except ProtocolError:
        pass
    buf = data[buf_start:]
    for fn in (wire.decode_uvarint, wire.decode_uvarlong, wire.decode_varint, wire.decode_varlong):
        try:
            fn(buf, 0)
        except ProtocolError:
            pass
    try:
        wire.sum_varints(buf)
    except ProtocolError:
        pass
    wire.decode_varints(buf, nops)


def _wire_seeds() -> list[bytes]:
    from kcore import wire
    w = wire.Writer()
    w.int8(1)
    w.int16(-2)
    w.int32(70000)
    w.int64(-5)
    w.uvarint(300)
    w.varint(-300)
    w.varlong(-(2**40))
    w.string("topic")
    w.nullable_string(None)
    w.compact_string("compact")
    w.compact_nullable_string(None)
    w.bytes(b"abc")
    w.compact_bytes(b"xyz")
    w.uuid(uuid.UUID(int=0x1234))
    w.array_len(3)
    w.compact_array_len(2)
    w.tagged_fields({0: b"\x01", 5: b"hello"})
    buf = w.getvalue()
    names = ["int8", "int16", "int32", "int64", "uvarint", "varint", "varlong", "string",
             "nullable_string", "compact_string", "compact_nullable_string", "bytes", "compact_bytes",
             "uuid", "array_len", "compact_array_len", "tagged_fields"]
    ops = []
    for n in names:
        ops.append(_READER_OPS.index(n))
        if n in _READER_ARG_OPS:
            ops.append(1)
    ops = ops[:31]
    return [bytes([len(ops)]) + bytes(ops) + buf, bytes([len(ops) | 32]) + bytes(ops) + buf,
            bytes([3, _READER_OPS.index("varint")] * 1 + [_READER_OPS.index("raw"), 4]) + b"\x80\x01abcd"]


def _protocol_expected() -> tuple[type[BaseException], ...]:
    from kcore.errors import ProtocolError
    return (ProtocolError,)


# --------------------------------------------------------------------------- kcore.frames
class _ChunkSocket:
    """recv_into from a list of chunks; would block once when they run out, then EOF."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks
        self.blocked = False

    def recv_into(self, view) -> int:
        if not self.chunks:
            if not self.blocked:
                self.blocked = True
                raise BlockingIOError
            return 0
        chunk = self.chunks[0]
        n = min(len(chunk), len(view))
        view[:n] = chunk[:n]
        if n == len(chunk):
            self.chunks.pop(0)
        else:
            self.chunks[0] = chunk[n:]
        return n


def _run_frames(data: bytes) -> None:
    """Byte 0: max frame size (x 64 bytes, 0 = 100 MiB) ; byte 1: chunk size - 1; the rest:
    the byte stream of size-prefixed frames. FrameSplitter and FrameReceiver must agree, and
    each frame goes through the header decoders."""
    from kcore import frames as F
    from kcore.errors import KafkaConnectionError, ProtocolError
    if len(data) < 2:
        return
    limit = data[0] * 64 or 104857600
    step = data[1] + 1
    stream = data[2:]
    chunks = [stream[i:i + step] for i in range(0, len(stream), step)]
    splitter = F.FrameSplitter(limit)
    split: list[bytes] | None = []
    try:
        for c in chunks:
            split += [bytes(f) for f in splitter.feed(c)]  # type: ignore[operator]
    except ProtocolError:
        split = None
    receiver = F.FrameReceiver(limit, buffer_size=64 + data[1] * 4)
    sock = _ChunkSocket(list(chunks))
    received: list[bytes] | None = []
    try:
        for _ in range(len(chunks) + 2):
            received += receiver.receive(sock, drain=bool(data[1] & 1))  # type: ignore[operator]
    except KafkaConnectionError:
        pass
    except ProtocolError:
        received = None
    if split is not None and received is not None:
        assert split == received, "FrameSplitter and FrameReceiver disagree"
    for frame in split or ():
        for fn, args in ((F.decode_response_header, (0,)), (F.decode_response_header, (1,)),
                         (F.response_correlation_id, ()), (F.decode_request_header, (1,)),
                         (F.decode_request_header, (2,)), (F.peek_request_api, ())):
            try:
                fn(frame, *args)
            except ProtocolError:
                pass


def _frames_seeds() -> list[bytes]:
    from kcore import frames as F
    frames = [F.encode_request_header(18, 3, 7, "client", 2) + b"\x00\x01",
              F.encode_request_header(1, 11, 8, None, 1) + b"body",
              F.encode_response_header(7, 0) + b"\x00\x00", F.encode_response_header(9, 1) + b"\x00", b""]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    return [bytes([0, step]) + stream for step in (0, 3, 255)] + [bytes([1, 7]) + stream]


# --------------------------------------------------------------------------- responses
def _fill(fields, version: int, depth: int = 0) -> dict:
    """A body with every field of ``version`` set to a non-default value (two elements per
    array), so the seed exercises every field's decoder."""
    from kcore import records as R
    body: dict[str, Any] = {}
    for f in fields:
        if not f.in_version(version):
            continue
        if f.is_struct:
            one = _fill(f.fields, version, depth + 1)
            body[f.name] = [one, dict(one)] if f.is_array else one
            continue
        t = f.element_type
        value: Any
        if t == "bool":
            value = True
        elif t in ("int8", "int16", "uint16", "int32", "int64"):
            value = 3
        elif t == "float64":
            value = 1.5
        elif t == "uuid":
            value = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)
        elif t == "string":
            value = "name-%d" % depth
        elif t == "bytes":
            value = b"\x00\x01\x02"
        elif t == "records":
            value = R.encode_batch(_sample_records(2), base_offset=3)
        else:
            raise ValueError(t)
        body[f.name] = [value, value] if f.is_array else value
    return body


def response_seeds(api_key: int) -> list[bytes]:
    """Byte 0 selects the version (index into the message's versions); the rest is the
    response frame without its size prefix."""
    from kclient.protocol import encode_response
    from kclient.protocol.messages import RESPONSES
    msg = RESPONSES[api_key]
    out = []
    for i, v in enumerate(msg.versions()):
        out.append(bytes([i]) + encode_response(api_key, v, 7, {})[4:])
        try:
            full = _fill(msg.fields, v)
            out.append(bytes([i]) + encode_response(api_key, v, 8, full)[4:])
        except Exception:    # a schema corner the filler does not know: the default body stays
            pass
    if api_key == 18:
        # An UNSUPPORTED_VERSION answer in v0 form to a newer request (the fallback path).
        v0 = encode_response(18, 0, 7, {"error_code": 35, "api_keys": [
            {"api_key": 18, "min_version": 0, "max_version": 2}]})[4:]
        out += [bytes([i]) + v0 for i in range(len(msg.versions()))]
        out.append(bytes([3]) + struct.pack(">ihbhhhi", 7, 35, 1, 18, 0, 3, 0))
    return out


def _make_response_run(api_key: int) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        from kclient.protocol import decode_response
        from kclient.protocol.messages import RESPONSES
        if not data:
            return
        versions = RESPONSES[api_key].versions()
        decode_response(api_key, versions[data[0] % len(versions)], data[1:])
    return run


# --------------------------------------------------------------------------- kcore.compression
def _make_codec_run(codec: int) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        from kcore.compression import decompress
        out = decompress(codec, data, SMALL_BOUND)
        assert len(out) <= SMALL_BOUND, "decompressed past the bound"
    return run


def _make_codec_seeds(codec: int) -> Callable[[], list[bytes]]:
    def seeds() -> list[bytes]:
        from kcore.compression import compress
        samples = [b"", b"a", b"hello kafka " * 50, bytes(range(256)) * 4, b"\x00" * 5000] + record_seeds()[:2]
        out = [compress(codec, s) for s in samples]
        if codec == 2:
            import cramjam
            out += [bytes(cramjam.snappy.compress_raw(s)) for s in samples[:4]]   # unframed snappy
        return out
    return seeds


# --------------------------------------------------------------------------- kcore.groupcodec
def _groupcodec_seeds(api_key: int, top: int) -> list[bytes]:
    from kclient.protocol import encode_response
    out = []
    for v in range(top + 1):
        body: dict[str, Any] = {"error_code": 0, "throttle_time_ms": 5}
        if api_key == 13 and v >= 3:
            body["members"] = [{"member_id": "m-1", "group_instance_id": None, "error_code": 25}]
        try:
            out.append(bytes([v]) + encode_response(api_key, v, 11, body)[4:])
        except Exception:
            out.append(bytes([v]) + encode_response(api_key, v, 11, {})[4:])
    return out


def _run_heartbeat(data: bytes) -> None:
    from kcore import groupcodec
    if data:
        groupcodec.decode_heartbeat_response(data[0] % (groupcodec.MAX_HEARTBEAT_VERSION + 1), data[1:])


def _run_leave_group(data: bytes) -> None:
    from kcore import groupcodec
    if data:
        groupcodec.decode_leave_group_response(data[0] % (groupcodec.MAX_LEAVE_GROUP_VERSION + 1), data[1:])


def _run_consumer_group_heartbeat(data: bytes) -> None:
    from kcore import groupcodec
    if data:
        version = data[0] % (groupcodec.MAX_CONSUMER_GROUP_HEARTBEAT_VERSION + 1)
        ours = groupcodec.decode_consumer_group_heartbeat_response(version, data[1:])
        # What the C decoder accepts, the schema-driven codec must read alike.
        from kclient.errors import ProtocolError
        from kclient.protocol import decode_response
        try:
            ref = decode_response(68, version, data[1:])
        except ProtocolError as exc:
            raise AssertionError(f"the C decoder accepted what the schema codec refuses: {exc!r}") from None
        assert ours[2:] == (ref["error_code"], ref["member_epoch"], ref["heartbeat_interval_ms"],
                            ref["assignment"] is not None), (ours, ref)


def _cgh_seeds() -> list[bytes]:
    from kclient.protocol import encode_response
    out = []
    for v in range(2):
        for assignment in (None, {"topic_partitions": [{"topic_id": uuid.UUID(int=7), "partitions": [0, 3]}]}):
            body = {"throttle_time_ms": 1, "error_code": 0, "error_message": None, "member_id": "m-1",
                    "member_epoch": 4, "heartbeat_interval_ms": 500, "assignment": assignment}
            out.append(bytes([v]) + encode_response(68, v, 11, body)[4:])
    return out


def _value_error() -> tuple[type[BaseException], ...]:
    return (ValueError,)




# --------------------------------------------------------------------------- consumer protocol
def _run_assignment(data: bytes) -> None:
    from kclient.group.classic_embedded_protocol import deserialize_assignment
    deserialize_assignment(data)


def _run_subscription(data: bytes) -> None:
    from kclient.group.classic_embedded_protocol import deserialize_subscription
    deserialize_subscription(data, group_instance_id="static-1")


def _assignment_seeds() -> list[bytes]:
    from kclient.group.classic_embedded_protocol import Assignment, serialize_assignment
    from kclient.structs import TopicPartition as TP
    a = Assignment((TP("orders", 0), TP("orders", 3), TP("päyments", 1)), user_data=b"\x00\x01")
    return [serialize_assignment(a, v) for v in range(4)] + [serialize_assignment(Assignment())]


def _subscription_seeds() -> list[bytes]:
    from kclient.group.classic_embedded_protocol import Subscription, serialize_subscription
    from kclient.structs import TopicPartition as TP
    s = Subscription(("orders", "payments"), user_data=b"ud", owned_partitions=(TP("orders", 2),),
                     generation_id=4, rack_id="rack-a")
    return [serialize_subscription(s, v) for v in range(4)] + [serialize_subscription(Subscription(()))]


def _run_sticky(data: bytes) -> None:
    from kclient.group.assignors.sticky import decode_sticky_user_data
    out = decode_sticky_user_data(data)
    assert all(tp.partition >= 0 for tp in out.partitions), "negative partition accepted"


def _sticky_seeds() -> list[bytes]:
    from kclient.group.assignors.sticky import encode_sticky_user_data
    from kclient.structs import TopicPartition as TP
    parts = [TP("orders", 0), TP("orders", 5), TP("x", 1)]
    full = encode_sticky_user_data(parts, 7)
    return [full, full[:-4], encode_sticky_user_data([], 1)]


def _nothing() -> tuple[type[BaseException], ...]:
    return ()


# --------------------------------------------------------------------------- SASL / SCRAM
def _run_scram(data: bytes) -> None:
    """Byte 0 bit 0: SCRAM-SHA-512 instead of -256; then the server-first message, a NUL, and
    the server-final message (sent only if the server-first step succeeded)."""
    from kclient.network.sasl import ScramMechanism
    if not data:
        return
    mech = ScramMechanism("SCRAM-SHA-512" if data[0] & 1 else "SCRAM-SHA-256", "user", "pencil",
                          nonce=SCRAM_NONCE)
    mech.first()
    first, sep, final = data[1:].partition(b"\x00")
    mech.step(first)
    if sep:
        mech.step(final)


def _scram_seeds() -> list[bytes]:
    from kclient.network.sasl import ScramMechanism
    out = []
    for flag, name in ((0, "SCRAM-SHA-256"), (1, "SCRAM-SHA-512")):
        server_first = f"r={SCRAM_NONCE}srv-nonce,s={base64.b64encode(b'salt-bytes').decode()},i=4096".encode()
        mech = ScramMechanism(name, "user", "pencil", nonce=SCRAM_NONCE)
        mech.first()
        mech.step(server_first)
        signature = mech._server_signature or b""
        out.append(bytes([flag]) + server_first + b"\x00v=" + base64.b64encode(signature))
        out.append(bytes([flag]) + server_first)
    out.append(b"\x00e=invalid-proof")
    return out


def _sasl_expected() -> tuple[type[BaseException], ...]:
    from kclient.errors import AuthenticationFailedError
    return (AuthenticationFailedError,)


# --------------------------------------------------------------------------- the registry
def _record_target_seeds() -> list[bytes]:
    # flags 0: CRCs unchecked (mutations reach the scanner), 1: checked, 0x44: read_committed
    # with Arrow conversion for the columnar target, 0x80: the default decompression policy
    return _with_prefix([0x00, 0x01, 0x06, 0x44, 0x80], record_seeds())


# Response decoders to fuzz: every api key kclient.protocol.messages.RESPONSES declares (a test
# checks the two lists agree; they are kept apart so naming the targets imports nothing).
API_NAMES = {
    0: "produce", 1: "fetch", 2: "list_offsets", 3: "metadata", 8: "offset_commit", 9: "offset_fetch",
    10: "find_coordinator", 11: "join_group", 12: "heartbeat", 13: "leave_group", 14: "sync_group",
    15: "describe_groups", 16: "list_groups", 17: "sasl_handshake", 18: "api_versions",
    19: "create_topics", 20: "delete_topics", 21: "delete_records", 23: "offset_for_leader_epoch",
    36: "sasl_authenticate", 37: "create_partitions", 68: "consumer_group_heartbeat",
}


def build_targets() -> dict[str, Target]:
    """Every target by name. Building one imports nothing: the modules under test are
    imported by its seeds()/run()/expected on first use (inside the child's instrumentation)."""
    targets: dict[str, Target] = {}

    def add(name: str, description: str, run, expected, seeds, instrument=()) -> None:
        targets[name] = Target(name, description, run, expected, seeds, tuple(instrument))

    add("records", "kcore.records.decode_records", _run_records, _records_expected, _record_target_seeds)
    add("consumer_records", "kcore.records.decode_consumer_records", _run_consumer_records,
        _records_expected, _record_target_seeds)
    add("columnar", "kcore.records.decode_columnar (+ to_arrow)", _run_columnar, _records_expected,
        _record_target_seeds)
    add("wire", "kcore.wire.Reader and varint decoders", _run_wire, _protocol_expected, _wire_seeds)
    add("frames", "kcore.frames FrameSplitter/FrameReceiver and header decoders", _run_frames,
        _frames_expected, _frames_seeds)
    for key, api in API_NAMES.items():
        add(f"response.{api}", f"kclient.protocol.decode_response({key}, v, frame)",
            _make_response_run(key), _protocol_expected, (lambda k: lambda: response_seeds(k))(key),
            ["kclient.protocol"])
    for codec, cname in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        add(f"decompress.{cname}", f"kcore.compression.decompress({codec}, data, 1 MiB)",
            _make_codec_run(codec), _records_expected, _make_codec_seeds(codec))
    add("groupcodec.heartbeat", "kcore.groupcodec.decode_heartbeat_response", _run_heartbeat, _value_error,
        lambda: _groupcodec_seeds(12, 4))
    add("groupcodec.leave_group", "kcore.groupcodec.decode_leave_group_response", _run_leave_group,
        _value_error, lambda: _groupcodec_seeds(13, 5))
    add("groupcodec.consumer_group_heartbeat", "kcore.groupcodec.decode_consumer_group_heartbeat_response",
        _run_consumer_group_heartbeat, _value_error, _cgh_seeds)
    add("consumer_protocol.assignment", "kclient.group.classic_embedded_protocol.deserialize_assignment",
        _run_assignment, _protocol_expected, _assignment_seeds, ["kclient.group.classic_embedded_protocol"])
    add("consumer_protocol.subscription", "kclient.group.classic_embedded_protocol.deserialize_subscription",
        _run_subscription, _protocol_expected, _subscription_seeds, ["kclient.group.classic_embedded_protocol"])
    add("sticky_user_data", "kclient.group.assignors.sticky.decode_sticky_user_data", _run_sticky, _nothing,
        _sticky_seeds, ["kclient.group.assignors.sticky", "kclient.group.classic_embedded_protocol"])
    add("sasl.scram", "kclient.network.sasl.ScramMechanism.step (server-first, server-final)", _run_scram,
        _sasl_expected, _scram_seeds, ["kclient.network.sasl"])
    # Checks of the harness itself (not in "all"): a finding of each kind on the first seed.
    add("selftest.exception", "harness check: raises KeyError", _selftest_exception, _nothing, _selftest_seeds)
    add("selftest.hang", "harness check: an input that never returns", _selftest_hang, _nothing, _selftest_seeds)
    add("selftest.abort", "harness check: the process dies (SIGABRT)", _selftest_abort, _nothing, _selftest_seeds)
    return targets


def _selftest_seeds() -> list[bytes]:
    return [b"!boom"]


def _selftest_exception(data: bytes) -> None:
    if data.startswith(b"!"):
        raise KeyError("selftest")


def _selftest_hang(data: bytes) -> None:
    import time
    while data.startswith(b"!"):
        time.sleep(0.05)


def _selftest_abort(data: bytes) -> None:
    import os
    if data.startswith(b"!"):
        os.abort()


def _frames_expected() -> tuple[type[BaseException], ...]:
    from kcore.errors import KafkaConnectionError, ProtocolError
    return (ProtocolError, KafkaConnectionError)

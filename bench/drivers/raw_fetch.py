"""The broker's ceiling on this machine: Fetch requests over plain sockets, no record decoding.

Frames are built and parsed with kclient.protocol (encode_request / decode_response, whose
"records" fields are zero-copy views) and split with kcore.frames.FrameSplitter. The
partitions of each leader are dealt round-robin into up to ``PIPELINE_DEPTH`` groups, each
group always has one Fetch in flight, so the connection is never idle while a response is
being handled. Of each answer only the RecordBatch headers are read (61 bytes per batch:
base offset, length, last offset delta, record count) to count records and find the next
fetch offset; the first record of each uncompressed batch is parsed for the sequence-number
spot check. Value bytes are taken as count x record size (values are never looked at).
"""
from __future__ import annotations

import selectors
import socket
import struct
from kclient.protocol import ApiKey

LABEL = "raw fetch (ceiling)"
GROUP_MODE = False
PIPELINE_DEPTH = 4
PARTITION_MAX_BYTES = 8 * 1024 * 1024
FETCH_MAX_BYTES = 64 * 1024 * 1024
MAX_WAIT_MS = 100
CLIENT_ID = "bench-raw-fetch"

_BATCH_HEAD = struct.Struct(">qi")      # base offset, batch length (from the partition leader epoch on)
_I32 = struct.Struct(">i")
_BATCH_OVERHEAD = 61                    # RecordBatch v2 header through the record count
_FETCH, _METADATA, _API_VERSIONS = int(ApiKey.FETCH), int(ApiKey.METADATA), int(ApiKey.API_VERSIONS)
_MAX_FETCH_VERSION = 12                 # v13+ names topics by id; names keep this simple


def version() -> str:
    import kclient
    return f"kclient.protocol {kclient.__version__}"


def prepare() -> None:
    import kclient.protocol  # noqa: F401
    import kcore.frames  # noqa: F401


def _varint(buf, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos``: (value, next position)."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


class _Conn:
    """A blocking socket with correlation ids and a frame splitter."""

    def __init__(self, host: str, port: int) -> None:
        from kcore.frames import FrameSplitter
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.splitter = FrameSplitter(FETCH_MAX_BYTES * 2)
        self.next_id = 0
        self.pending: dict[int, object] = {}   # correlation id -> what the request was for
        self.frames: list = []

    def send(self, api_key: int, version: int, body: dict, tag: object = None) -> int:
        from kclient.protocol import encode_request
        self.next_id += 1
        self.pending[self.next_id] = tag
        self.sock.sendall(encode_request(api_key, version, self.next_id, CLIENT_ID, body))
        return self.next_id

    def read_frames(self) -> list:
        chunk = self.sock.recv(4 * 1024 * 1024)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        return self.splitter.feed(chunk)

    def call(self, api_key: int, version: int, body: dict) -> dict:
        """One request, wait for its answer (setup only: nothing else may be in flight)."""
        from kclient.protocol import decode_response, response_correlation_id
        cid = self.send(api_key, version, body)
        while True:
            for frame in self.read_frames():
                if response_correlation_id(frame) == cid:
                    del self.pending[cid]
                    return decode_response(api_key, version, frame)

    def close(self) -> None:
        self.sock.close()


def consume(job, tally) -> dict:
    from bench.drivers._common import InvalidRun
    from kclient.protocol import decode_response, negotiate, response_correlation_id

    add, check = tally.add, tally.check
    expected = job.expected_per_partition()
    offsets = [0] * job.partitions
    tally.start()
    host, _, port = job.bootstrap.split(",")[0].rpartition(":")
    boot = _Conn(host, int(port))
    api = boot.call(_API_VERSIONS, 3, {"client_software_name": CLIENT_ID, "client_software_version": "1"})
    if api["error_code"]:
        api = boot.call(_API_VERSIONS, 0, {})
    versions = negotiate({k["api_key"]: (k["min_version"], k["max_version"]) for k in api["api_keys"]})
    fetch_v = min(versions[_FETCH], _MAX_FETCH_VERSION)
    meta = boot.call(_METADATA, min(versions[_METADATA], 12),
                     {"topics": [{"name": job.topic}], "allow_auto_topic_creation": False})
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}
    (topic_meta,) = [t for t in meta["topics"] if t["name"] == job.topic]
    by_leader: dict[int, list[int]] = {}
    for p in topic_meta["partitions"]:
        by_leader.setdefault(p["leader_id"], []).append(p["partition_index"])
    boot.close()

    conns: dict[int, _Conn] = {}
    sel = selectors.DefaultSelector()
    for leader in by_leader:
        conn = conns[leader] = _Conn(*brokers[leader])
        sel.register(conn.sock, selectors.EVENT_READ, conn)

    def send_fetch(conn: _Conn, group: list[int]) -> None:
        live = [p for p in group if offsets[p] < expected[p]]
        if not live:
            return
        conn.send(_FETCH, fetch_v, {
            "replica_id": -1, "max_wait_ms": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": job.topic, "partitions": [
                {"partition": p, "fetch_offset": offsets[p], "current_leader_epoch": -1,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": PARTITION_MAX_BYTES}
                for p in live]}],
            "forgotten_topics_data": [], "rack_id": ""}, tag=group)

    for leader, parts in by_leader.items():
        depth = min(PIPELINE_DEPTH, len(parts))
        for g in range(depth):
            send_fetch(conns[leader], parts[g::depth])

    frames_seen = batches_seen = 0
    try:
        while not tally.done:
            if tally.timed_out():
                break
            for key, _ in sel.select(timeout=1.0):
                conn = key.data
                for frame in conn.read_frames():
                    cid = response_correlation_id(frame)
                    group = conn.pending.pop(cid)
                    resp = decode_response(_FETCH, fetch_v, frame)
                    frames_seen += 1
                    if resp.get("error_code"):
                        raise InvalidRun(f"fetch error {resp['error_code']}")
                    n = 0
                    for t in resp["responses"]:
                        for pd in t["partitions"]:
                            p = pd["partition_index"]
                            if pd["error_code"]:
                                raise InvalidRun(f"partition {p}: fetch error {pd['error_code']}")
                            records = pd["records"]
                            if records is None:
                                continue
                            fetch_offset = offsets[p]
                            pos, end = 0, len(records)
                            while pos + _BATCH_OVERHEAD <= end:
                                base, length = _BATCH_HEAD.unpack_from(records, pos)
                                nxt = pos + 12 + length
                                if nxt > end:
                                    break  # a partial batch at the end of the answer
                                if records[pos + 16] != 2:
                                    raise InvalidRun(f"partition {p}: record batch magic {records[pos + 16]}")
                                last = base + _I32.unpack_from(records, pos + 23)[0]
                                if last >= fetch_offset:
                                    n += last + 1 - max(base, fetch_offset)
                                    fetch_offset = last + 1
                                    if base >= offsets[p] and not (records[pos + 22] & 0x07):
                                        _spot_check(check, p, base, records, pos + _BATCH_OVERHEAD)
                                batches_seen += 1
                                pos = nxt
                            offsets[p] = fetch_offset
                            if fetch_offset > expected[p]:
                                raise InvalidRun(f"partition {p}: offset {fetch_offset} beyond the "
                                                 f"{expected[p]} records produced")
                    send_fetch(conn, group)
                    if add(n, n * job.record_size):
                        break
    finally:
        for conn in conns.values():
            conn.close()
        sel.close()
    return {"pipeline_depth": PIPELINE_DEPTH, "partition_max_bytes": PARTITION_MAX_BYTES,
            "fetch_max_bytes": FETCH_MAX_BYTES, "fetch_version": fetch_v, "responses": frames_seen,
            "batches": batches_seen}


def _spot_check(check, partition: int, base_offset: int, buf, pos: int) -> None:
    """Sequence number of the first record of an uncompressed batch."""
    _, pos = _varint(buf, pos)           # record length
    pos += 1                             # attributes
    _, pos = _varint(buf, pos)           # timestamp delta
    delta, pos = _varint(buf, pos)       # offset delta
    klen, pos = _varint(buf, pos)
    if klen > 0:
        pos += klen
    vlen, pos = _varint(buf, pos)
    check(partition, base_offset + delta, bytes(buf[pos:pos + max(vlen, 0)]) if vlen >= 0 else None)

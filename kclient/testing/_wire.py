"""Just enough of the Kafka wire format for the test harness to talk to its brokers.

The harness must work before (and independently of) the real codec in ``kclient.protocol``:
it is what the codec's integration tests run against, so it cannot depend on it. Only the
non-flexible versions of the few requests the harness needs are implemented here (ApiVersions
v0, Metadata v4, CreateTopics v4, DeleteTopics v3, ListOffsets v1, DeleteRecords v1,
IncrementalAlterConfigs v0), all valid in Kafka 4.
"""
from __future__ import annotations

import socket
import struct
import time

__all__ = [
    "RawConnection", "Reader", "parse_bootstrap", "request_frame",
    "api_versions", "metadata", "create_topics", "delete_topics", "list_offsets", "delete_records",
    "incremental_alter_configs",
]

_MAX_FRAME = 64 * 1024 * 1024  # the harness never expects more; a bigger prefix is garbage


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """First ``host:port`` of a comma-separated bootstrap list."""
    first = bootstrap.split(",")[0].strip()
    for prefix in ("tcp://", "PLAINTEXT://", "plaintext://"):
        if first.startswith(prefix):
            first = first[len(prefix):]
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str | None,
                  body: bytes) -> bytes:
    """A size-prefixed request with header v1 (all versions built here are non-flexible)."""
    payload = struct.pack(">hhi", api_key, version, correlation_id) + _string(client_id) + body
    return struct.pack(">i", len(payload)) + payload


class Reader:
    """Sequential big-endian reader over a response frame; raises ValueError on truncation."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = bytes(data)
        self.pos = pos

    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"truncated frame at byte {self.pos} (need {size}, have {len(self.data) - self.pos})")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def i8(self) -> int:
        return self._take(">b")

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def i64(self) -> int:
        return self._take(">q")

    def bool(self) -> bool:
        return self._take(">b") != 0

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError(f"truncated string at byte {self.pos}")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def name(self) -> str:
        """A non-nullable STRING (topic names); null is a malformed answer."""
        s = self.string()
        if s is None:
            raise ValueError(f"null string at byte {self.pos} where the protocol has a name")
        return s

    def array_len(self) -> int:
        n = self.i32()
        # Each element is at least one byte: a larger count is corrupt, not a reason to loop.
        if n > len(self.data) - self.pos:
            raise ValueError(f"array count {n} exceeds remaining {len(self.data) - self.pos} bytes")
        return n

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(">B")
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise ValueError("uvarint too long")

    def remaining(self) -> int:
        return len(self.data) - self.pos


class RawConnection:
    """One blocking TCP connection; requests are answered in order, one at a time."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, client_id: str = "kclient-harness") -> None:
        self.client_id = client_id
        self._corr = 0
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @classmethod
    def to(cls, bootstrap: str, timeout: float = 10.0) -> "RawConnection":
        host, port = parse_bootstrap(bootstrap)
        return cls(host, port, timeout)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._corr += 1
        return self._corr

    def send(self, frame: bytes) -> None:
        self._sock.sendall(frame)

    def recv_frame(self) -> bytes:
        """The next response frame without its size prefix."""
        (size,) = struct.unpack(">i", self._recv_exact(4))
        if size < 4 or size > _MAX_FRAME:
            raise ValueError(f"bad response size prefix {size}")
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed by broker after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def call(self, api_key: int, version: int, body: bytes) -> Reader:
        """Send one request and return a Reader positioned after the response header (v0)."""
        corr = self.next_correlation_id()
        self.send(request_frame(api_key, version, corr, self.client_id, body))
        reader = Reader(self.recv_frame())
        got = reader.i32()
        if got != corr:
            raise ValueError(f"correlation id {got} does not match request {corr}")
        return reader


def api_versions(conn: RawConnection) -> tuple[int, dict[int, tuple[int, int]]]:
    """ApiVersions v0: (error_code, {api_key: (min, max)})."""
    r = conn.call(18, 0, b"")
    error = r.i16()
    ranges = {}
    for _ in range(r.array_len()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        ranges[key] = (lo, hi)
    return error, ranges


def metadata(conn: RawConnection, topics: list[str] | None = None) -> dict:
    """Metadata v4 without auto-creation. topics=None asks for all topics."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
    body += b"\x00"  # allow_auto_topic_creation = false: looking must not create
    r = conn.call(3, 4, body)
    r.i32()  # throttle_time_ms
    brokers = {}
    for _ in range(r.array_len()):
        node_id, host, port = r.i32(), r.string(), r.i32()
        r.string()  # rack
        brokers[node_id] = (host, port)
    cluster_id = r.string()
    controller_id = r.i32()
    out_topics = {}
    for _ in range(r.array_len()):
        error, name, internal = r.i16(), r.string(), r.bool()
        partitions = {}
        for _ in range(r.array_len()):
            p_error, index, leader = r.i16(), r.i32(), r.i32()
            replicas = [r.i32() for _ in range(r.array_len())]
            isr = [r.i32() for _ in range(r.array_len())]
            partitions[index] = {"error_code": p_error, "leader_id": leader, "replica_nodes": replicas,
                                 "isr_nodes": isr}
        out_topics[name] = {"error_code": error, "is_internal": internal, "partitions": partitions}
    return {"brokers": brokers, "cluster_id": cluster_id, "controller_id": controller_id,
            "topics": out_topics}


def create_topics(conn: RawConnection, topics: list[tuple[str, int, int, dict[str, str]]],
                  timeout_ms: int = 30000) -> list[tuple[str, int, str | None]]:
    """CreateTopics v4: [(name, error_code, error_message)] for [(name, partitions, rf, configs)]."""
    body = struct.pack(">i", len(topics))
    for name, partitions, replication_factor, configs in topics:
        body += _string(name) + struct.pack(">ihi", partitions, replication_factor, 0)
        body += struct.pack(">i", len(configs))
        for key, value in configs.items():
            body += _string(key) + _string(value)
    body += struct.pack(">ib", timeout_ms, 0)  # validate_only = false
    r = conn.call(19, 4, body)
    r.i32()  # throttle_time_ms
    return [(r.name(), r.i16(), r.string()) for _ in range(r.array_len())]


def list_offsets(conn: RawConnection, topic: str, partitions: list[int],
                 timestamp: int = -1) -> dict[int, tuple[int, int]]:
    """ListOffsets v1 (-1 latest, -2 earliest): {partition: (error_code, offset)}.

    Sent to one broker: only the partitions it leads answer without NOT_LEADER_OR_FOLLOWER.
    """
    body = struct.pack(">ii", -1, 1) + _string(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">iq", p, timestamp) for p in partitions)
    r = conn.call(2, 1, body)
    out = {}
    for _ in range(r.array_len()):
        r.string()
        for _ in range(r.array_len()):
            index, error = r.i32(), r.i16()
            r.i64()  # timestamp
            out[index] = (error, r.i64())
    return out


def delete_records(conn: RawConnection, topic: str, partition: int, before_offset: int,
                   timeout_ms: int = 30000) -> tuple[int, int]:
    """DeleteRecords v1 to the partition's leader: (error_code, new low watermark)."""
    body = struct.pack(">i", 1) + _string(topic) + struct.pack(">iiq", 1, partition, before_offset)
    body += struct.pack(">i", timeout_ms)
    r = conn.call(21, 1, body)
    r.i32()  # throttle_time_ms
    r.array_len()
    r.string()
    r.array_len()
    r.i32()  # partition index
    low = r.i64()
    return r.i16(), low


def delete_topics(conn: RawConnection, names: list[str], timeout_ms: int = 30000) -> list[tuple[str, int]]:
    """DeleteTopics v3: [(name, error_code)]."""
    body = struct.pack(">i", len(names)) + b"".join(_string(n) for n in names)
    body += struct.pack(">i", timeout_ms)
    r = conn.call(20, 3, body)
    r.i32()  # throttle_time_ms
    return [(r.name(), r.i16()) for _ in range(r.array_len())]


def incremental_alter_configs(conn: RawConnection, resource_type: int, name: str,
                              configs: dict[str, str | None]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 of one resource: SET each config (DELETE where the value is
    None); (error_code, error_message)."""
    body = struct.pack(">i", 1) + struct.pack(">b", resource_type) + _string(name) + struct.pack(">i", len(configs))
    for key, value in configs.items():
        body += _string(key) + struct.pack(">b", 0 if value is not None else 1) + _string(value)
    body += struct.pack(">b", 0)  # validate_only = false
    r = conn.call(44, 0, body)
    r.i32()  # throttle_time_ms
    r.array_len()
    return r.i16(), r.string()


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass.

    Returns the truthy value; raises TimeoutError naming ``what`` otherwise. The short
    pause between polls is a backoff, not the thing being waited for.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)

"""A small protobuf reader for the OTLP MetricsData clients push (KIP-714), for tests: just the
fields kclient and the Java client write (names, attributes, gauge and sum points)."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field


def _fields(data: bytes):
    """(field number, wire type, value) of each field of one message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(data, pos)
            value, pos = data[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire} at byte {pos}")
        yield number, wire, value


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


@dataclass
class Point:
    attributes: dict[str, object]
    value: float
    start_ns: int = 0
    time_ns: int = 0


@dataclass
class Metric:
    name: str
    kind: str = ""                  # "gauge" or "sum"
    temporality: int = 0            # sums: 1 delta, 2 cumulative
    monotonic: bool = False
    points: list[Point] = field(default_factory=list)


def _any_value(data: bytes) -> object:
    for number, _, value in _fields(data):
        if number == 1:
            return value.decode()
        if number == 2:
            return bool(value)
        if number == 3:
            return value - (1 << 64) if value >= 1 << 63 else value
        if number == 4:
            return struct.unpack("<d", value)[0]
    return None


def _attributes(items: list[bytes]) -> dict[str, object]:
    out = {}
    for kv in items:
        key = val = None
        for number, _, value in _fields(kv):
            if number == 1:
                key = value.decode()
            elif number == 2:
                val = _any_value(value)
        out[key] = val
    return out


def _point(data: bytes) -> Point:
    attrs, value, start, at = [], 0.0, 0, 0
    for number, _, raw in _fields(data):
        if number == 7:
            attrs.append(raw)
        elif number == 2:
            start = struct.unpack("<Q", raw)[0]
        elif number == 3:
            at = struct.unpack("<Q", raw)[0]
        elif number == 4:
            value = struct.unpack("<d", raw)[0]
        elif number == 6:
            value = struct.unpack("<q", raw)[0]
    return Point(_attributes(attrs), value, start, at)


def _metric(data: bytes) -> Metric:
    m = Metric("")
    for number, _, raw in _fields(data):
        if number == 1:
            m.name = raw.decode()
        elif number in (5, 7):
            m.kind = "gauge" if number == 5 else "sum"
            for n2, _, v2 in _fields(raw):
                if n2 == 1:
                    m.points.append(_point(v2))
                elif n2 == 2:
                    m.temporality = v2
                elif n2 == 3:
                    m.monotonic = bool(v2)
    return m


def decode_metrics_data(data: bytes) -> tuple[dict[str, object], list[Metric]]:
    """(resource attributes, metrics) of a MetricsData message."""
    resource: dict[str, object] = {}
    metrics: list[Metric] = []
    for number, _, rm in _fields(data):
        if number != 1:
            continue
        for n2, _, v2 in _fields(rm):
            if n2 == 1:
                resource.update(_attributes([kv for n3, _, kv in _fields(v2) if n3 == 1]))
            elif n2 == 2:
                metrics.extend(_metric(m) for n3, _, m in _fields(v2) if n3 == 2)
    return resource, metrics

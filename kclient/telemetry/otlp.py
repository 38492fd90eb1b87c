"""Just enough protobuf to write OTLP ``MetricsData`` (opentelemetry-proto metrics v1) with
gauges and sums of double points: the payload of a PushTelemetry request (KIP-714).

Field numbers (metrics.proto / common.proto / resource.proto): MetricsData.resource_metrics 1;
ResourceMetrics.resource 1, .scope_metrics 2; Resource.attributes 1; ScopeMetrics.scope 1,
.metrics 2; InstrumentationScope.name 1, .version 2; Metric.name 1, .description 2, .gauge 5,
.sum 7; Gauge.data_points 1; Sum.data_points 1, .aggregation_temporality 2, .is_monotonic 3;
NumberDataPoint.start_time_unix_nano 2 (fixed64), .time_unix_nano 3 (fixed64), .as_double 4,
.attributes 7; KeyValue.key 1, .value 2; AnyValue.string_value 1.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

from kcore.wire import encode_uvarint

__all__ = ["DataPoint", "encode_metrics_data", "TEMPORALITY_DELTA", "TEMPORALITY_CUMULATIVE"]

TEMPORALITY_DELTA = 1
TEMPORALITY_CUMULATIVE = 2

_LEN, _FIXED64, _VARINT = 2, 1, 0


@dataclass(frozen=True)
class DataPoint:
    """One value of one metric: ``kind`` "gauge" or "sum" (monotonic)."""
    name: str
    kind: str
    attributes: tuple[tuple[str, str], ...]
    value: float
    time_ns: int
    start_ns: int = 0
    description: str = ""


def _key(number: int, wire: int) -> bytes:
    return encode_uvarint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:
    return _key(number, _LEN) + encode_uvarint(len(data)) + data


def _string(number: int, s: str) -> bytes:
    return _bytes(number, s.encode())


def _key_values(number: int, attributes: Iterable[tuple[str, str]]) -> bytes:
    return b"".join(_bytes(number, _string(1, k) + _bytes(2, _string(1, v))) for k, v in attributes)


def _point(p: DataPoint) -> bytes:
    out = _key_values(7, p.attributes)
    if p.start_ns:
        out += _key(2, _FIXED64) + struct.pack("<Q", p.start_ns)
    out += _key(3, _FIXED64) + struct.pack("<Q", p.time_ns)
    out += _key(4, _FIXED64) + struct.pack("<d", p.value)
    return out


def _metric(p: DataPoint, temporality: int) -> bytes:
    out = _string(1, p.name)
    if p.description:
        out += _string(2, p.description)
    if p.kind == "sum":
        body = _bytes(1, _point(p)) + _key(2, _VARINT) + encode_uvarint(temporality) + _key(3, _VARINT) + b"\x01"
        return out + _bytes(7, body)
    return out + _bytes(5, _bytes(1, _point(p)))


def encode_metrics_data(points: Iterable[DataPoint], *, resource: Iterable[tuple[str, str]] = (),
                        scope: tuple[str, str] = ("kclient", ""), temporality: int = TEMPORALITY_CUMULATIVE) -> bytes:
    """One ResourceMetrics with one ScopeMetrics holding a Metric per point."""
    scope_msg = _string(1, scope[0]) + (_string(2, scope[1]) if scope[1] else b"")
    metrics = b"".join(_bytes(2, _metric(p, temporality)) for p in points)
    scope_metrics = _bytes(1, scope_msg) + metrics
    resource_metrics = _bytes(1, _key_values(1, resource)) + _bytes(2, scope_metrics)
    return _bytes(1, resource_metrics)

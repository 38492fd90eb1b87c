"""A client's metrics as OTLP data points under KIP-714's names, filtered by the subscription."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from kclient.telemetry.naming import telemetry_name
from kclient.telemetry.otlp import DataPoint

__all__ = ["TelemetryPoints", "selects"]


def selects(requested: list[str], name: str) -> bool:
    """Whether a subscription's ``metrics`` list asks for this name: prefixes; ``*`` or an
    empty prefix selects all, an empty list none."""
    for prefix in requested:
        if prefix in ("*", "") or name.startswith(prefix):
            return True
    return False


class TelemetryPoints:
    """Turns ``metrics()`` snapshots into data points; for delta temporality, sums are the
    change since the previous push (the first push: since the client started). ``kinds``:
    (group, metric) -> "sum" or "gauge" for each metric that may be pushed (others are not)."""

    def __init__(self, read_metrics: Callable[[], dict[str, dict[str, Any]]], start_ns: int,
                 kinds: Mapping[tuple[str, str], str]):
        self._read = read_metrics
        self._kinds = kinds
        self._start_ns = start_ns
        self._last: dict[tuple, tuple[float, int]] = {}

    def points(self, requested: list[str], delta: bool, now_ns: int) -> list[DataPoint]:
        out: list[DataPoint] = []
        for group_name, values in self._read().items():
            group, *tags = group_name.split(",")
            attributes = tuple((k.replace("-", "_"), v) for k, _, v in (t.partition("=") for t in tags))
            for name, value in values.items():
                kind = self._kinds.get((group, name))
                if kind is None or value is None:
                    continue
                full = telemetry_name(group, name)
                if not selects(requested, full):
                    continue
                value = float(value)
                start = self._start_ns
                if kind == "sum":
                    key = (full, attributes)
                    previous = self._last.get(key)
                    self._last[key] = (value, now_ns)
                    if delta and previous is not None:
                        value, start = value - previous[0], previous[1]
                    out.append(DataPoint(full, "sum", attributes, value, now_ns, start))
                else:
                    out.append(DataPoint(full, "gauge", attributes, value, now_ns))
        return out

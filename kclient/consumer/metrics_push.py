"""A consumer's KIP-714 push: its metrics() as the points (the Java client's metrics of the
table, not kclient's own), its group as the resource."""
from __future__ import annotations

import time
from typing import Any

from kclient.consumer.metric_table import TABLE
from kclient.telemetry.points import TelemetryPoints
from kclient.telemetry.sender import TelemetrySender

__all__ = ["consumer_telemetry"]

_PUSHED = {(m.group, m.name): m.kind for m in TABLE if m.java}


def consumer_telemetry(consumer: Any, group_id: str | None) -> TelemetrySender:
    def resource() -> list[tuple[str, str]]:
        # As the Java consumer describes itself: the group and its member id.
        out = []
        if group_id:
            out.append(("group_id", group_id))
            member = getattr(consumer._coordinator, "member_id", None)
            member = member() if callable(member) else member
            if member:
                out.append(("group_member_id", str(member)))
        return out

    return TelemetrySender(TelemetryPoints(consumer.metrics, time.time_ns(), _PUSHED), resource)

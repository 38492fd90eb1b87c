"""A consumer's KIP-714 push: its metrics() as the points (the Java client's metrics of the
table, not kclient's own), its group as the resource."""
from __future__ import annotations

import time
import weakref
from typing import Any

from kclient.consumer.metric_table import TABLE
from kclient.telemetry.points import TelemetryPoints
from kclient.telemetry.sender import TelemetrySender

__all__ = ["consumer_telemetry"]

_PUSHED = {(m.group, m.name): m.kind for m in TABLE if m.java}


def consumer_telemetry(consumer: Any, group_id: str | None) -> TelemetrySender:
    # The sender lives in the consumer's network client: a weak reference back keeps an
    # abandoned consumer collectable as soon as it is dropped (no cycle through its client).
    ref = weakref.ref(consumer)

    def metrics() -> dict[str, dict[str, Any]]:
        c = ref()
        return {} if c is None else c.metrics()

    def resource() -> list[tuple[str, str]]:
        # As the Java consumer describes itself: the group and its member id.
        out = []
        c = ref()
        if group_id and c is not None:
            out.append(("group_id", group_id))
            member = getattr(c._coordinator, "member_id", None)
            if member:
                out.append(("group_member_id", str(member)))
        return out

    return TelemetrySender(TelemetryPoints(metrics, time.time_ns(), _PUSHED), resource)

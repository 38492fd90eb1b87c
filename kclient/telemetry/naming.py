"""KIP-714's metric names: a consumer metric's Java group and name as one dotted name
(``consumer-coordinator-metrics`` ``join-rate`` -> ``org.apache.kafka.consumer.coordinator.join.rate``)."""
from __future__ import annotations

__all__ = ["telemetry_name", "PREFIX"]

PREFIX = "org.apache.kafka."


def telemetry_name(group: str, name: str) -> str:
    """The group without its ``-metrics`` suffix, then the name, dashes as dots."""
    if group.endswith("-metrics"):
        group = group[: -len("-metrics")]
    return PREFIX + f"{group}.{name}".replace("-", ".")

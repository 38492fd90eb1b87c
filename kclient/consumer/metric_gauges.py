"""The values of a consumer's metrics that are read off its state when ``metrics()`` is called
(connections, assignment, lag, last heartbeat), joined with the recorded statistics."""
from __future__ import annotations

from typing import Any

from kclient.consumer.metric_table import CLIENT, COORDINATOR, FETCH
from kclient.group.consumer_coordinator import ConsumerCoordinator
from kclient.consumer.metrics import collect

__all__ = ["collect_consumer_metrics"]


def _seconds_ago(then_ms: int | None, now_ms: int) -> float:
    return -1 if then_ms is None else (now_ms - then_ms) / 1000.0


def collect_consumer_metrics(consumer: Any, now_ms: int) -> dict[str, dict[str, Any]]:
    """``KafkaConsumer.metrics()`` of ``consumer``."""
    stats = consumer._stats
    fetcher = consumer._fetcher
    assigned = consumer._subscriptions.num_assigned_partitions()
    gauges: dict[str, dict[str, Any]] = {}
    lag_max = 0
    lead_min: int | None = None
    pipes = {} if fetcher is None else fetcher.buffer.pipes
    for tp, lag, lead in consumer._subscriptions.lags():
        pipe = pipes.get(tp)
        gauges[f"{FETCH},topic={tp.topic},partition={tp.partition}"] = {
            "records-lag": lag, "records-lead": lead,
            "preferred-read-replica": -1 if pipe is None else pipe.read_replica}
        lag_max = max(lag_max, lag)
        lead_min = lead if lead_min is None else min(lead_min, lead)
    gauges[FETCH] = {
        "records-lag-max": lag_max, "records-lead-min": 0 if lead_min is None else lead_min,
        "bytes-fetched-total": consumer._metrics.get("bytes-fetched-total", 0),
        "buffered-bytes": 0 if fetcher is None else fetcher.buffered_bytes,
        "fetches-in-flight": 0 if fetcher is None else fetcher.in_flight_fetches,
    }
    gauges[CLIENT] = {
        "connection-count": len(list(consumer._client.client.nodes_with_connections())),
        "assigned-partitions": assigned,
        "last-poll-seconds-ago": _seconds_ago(stats.last_poll_start_ms, now_ms),
    }
    coordinator = consumer._coordinator
    classic = isinstance(coordinator, ConsumerCoordinator)
    if coordinator is not None:
        heartbeat = getattr(coordinator, "heartbeat", None)
        gauges[COORDINATOR] = {
            "assigned-partitions": assigned,
            "last-heartbeat-seconds-ago": _seconds_ago(
                None if heartbeat is None else heartbeat.last_heartbeat_receive_ms, now_ms),
        }
        if classic:     # the classic coordinator records its rebalances
            gauges[COORDINATOR]["last-rebalance-seconds-ago"] = _seconds_ago(stats.last_rebalance_ms, now_ms)
    return collect(stats, gauges, now_ms, group_member=coordinator is not None, classic_member=classic)

"""Operator metrics of a consumer, under the Java client's names (``KafkaConsumer.metrics()``).

Rates, averages and maxima are computed as Kafka's client does: over ``metrics.num.samples``
windows of ``metrics.sample.window.ms`` each (the oldest window is dropped as a new one
starts), so they describe the last ``num × window`` of activity, not the whole life.
Everything is recorded per fetch answer, per poll, per commit or per rebalance, never per
record: the per-record path pays nothing.

Groups (as kafka-python's ``metrics()``: ``{group: {name: value}}``):

* ``consumer-fetch-manager-metrics``: records-consumed-rate/-total, bytes-consumed-rate/-total,
  fetch-rate/-total, fetch-latency-avg/-max, records-lag-max, plus kclient's buffered-bytes and
  fetches-in-flight;
* ``consumer-fetch-manager-metrics,topic=T,partition=P``: records-lag, records-lead (per
  assigned partition, Java's tags in the group name);
* ``consumer-coordinator-metrics``: commit-rate/-total, commit-latency-avg/-max,
  rebalance-total, rebalance-latency-avg/-max, last-heartbeat-seconds-ago, assigned-partitions;
* ``consumer-metrics``: connection-count, assigned-partitions.
"""
from __future__ import annotations

import threading

__all__ = ["WindowedStat", "ConsumerMetrics"]


class WindowedStat:
    """Count, sum and max of recorded values over the last ``samples`` windows."""

    __slots__ = ("_window_ms", "_samples", "_windows", "total_count", "total_sum")

    def __init__(self, window_ms: int, samples: int):
        self._window_ms = max(int(window_ms), 1)
        self._samples = max(int(samples), 1)
        self._windows: list[list[float]] = []      # [start_ms, count, sum, max]
        self.total_count = 0
        self.total_sum = 0.0

    def record(self, value: float, now_ms: int) -> None:
        self._roll(now_ms)
        w = self._windows[-1]
        w[1] += 1
        w[2] += value
        if w[1] == 1 or value > w[3]:
            w[3] = value
        self.total_count += 1
        self.total_sum += value

    def _roll(self, now_ms: int) -> None:
        ws = self._windows
        if not ws or now_ms - ws[-1][0] >= self._window_ms:
            ws.append([now_ms, 0, 0.0, 0.0])
        # Drop windows that ended before the span measured now.
        horizon = now_ms - self._window_ms * self._samples
        while len(ws) > 1 and (ws[0][0] + self._window_ms <= horizon or len(ws) > self._samples):
            ws.pop(0)

    def _live(self, now_ms: int) -> list[list[float]]:
        self._roll(now_ms)
        return self._windows

    def rate(self, now_ms: int, of_sum: bool = False) -> float:
        """Per second, over the span the kept windows cover (at least one window)."""
        ws = self._live(now_ms)
        elapsed = max(now_ms - ws[0][0], self._window_ms) / 1000.0
        return sum(w[2] if of_sum else w[1] for w in ws) / elapsed

    def avg(self, now_ms: int) -> float:
        ws = self._live(now_ms)
        n = sum(w[1] for w in ws)
        return sum(w[2] for w in ws) / n if n else 0.0

    def max(self, now_ms: int) -> float:
        ws = [w for w in self._live(now_ms) if w[1]]
        return max(w[3] for w in ws) if ws else 0.0


class ConsumerMetrics:
    """The recorded statistics of one consumer (thread-safe: the fetcher and the coordinator
    record from the application thread, the heartbeat thread may too)."""

    def __init__(self, window_ms: int = 30000, samples: int = 2):
        self._lock = threading.Lock()
        self.fetch_latency = WindowedStat(window_ms, samples)
        self.records = WindowedStat(window_ms, samples)        # value: records per poll
        self.bytes = WindowedStat(window_ms, samples)          # value: bytes per drained answer
        self.commit_latency = WindowedStat(window_ms, samples)
        self.rebalance_latency = WindowedStat(window_ms, samples)

    def fetch_done(self, latency_ms: float, now_ms: int) -> None:
        with self._lock:
            self.fetch_latency.record(latency_ms, now_ms)

    def consumed(self, records: int, now_ms: int) -> None:
        with self._lock:
            self.records.record(records, now_ms)

    def consumed_bytes(self, nbytes: int, now_ms: int) -> None:
        with self._lock:
            self.bytes.record(nbytes, now_ms)

    def commit_done(self, latency_ms: float, now_ms: int) -> None:
        with self._lock:
            self.commit_latency.record(latency_ms, now_ms)

    def rebalance_done(self, latency_ms: float, now_ms: int) -> None:
        with self._lock:
            self.rebalance_latency.record(latency_ms, now_ms)

    def fetch_group(self, now_ms: int) -> dict[str, float]:
        with self._lock:
            f, r, b = self.fetch_latency, self.records, self.bytes
            return {
                "fetch-rate": f.rate(now_ms), "fetch-total": f.total_count,
                "fetch-latency-avg": f.avg(now_ms), "fetch-latency-max": f.max(now_ms),
                "records-consumed-rate": r.rate(now_ms, of_sum=True), "records-consumed-total": int(r.total_sum),
                "bytes-consumed-rate": b.rate(now_ms, of_sum=True), "bytes-consumed-total": int(b.total_sum),
            }

    def coordinator_group(self, now_ms: int) -> dict[str, float]:
        with self._lock:
            c, rb = self.commit_latency, self.rebalance_latency
            return {
                "commit-rate": c.rate(now_ms), "commit-total": c.total_count,
                "commit-latency-avg": c.avg(now_ms), "commit-latency-max": c.max(now_ms),
                "rebalance-total": rb.total_count, "rebalance-latency-avg": rb.avg(now_ms),
                "rebalance-latency-max": rb.max(now_ms),
            }

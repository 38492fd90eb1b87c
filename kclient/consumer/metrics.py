"""Operator metrics of a consumer, under the Java client's names (``KafkaConsumer.metrics()``).

kclient.consumer.metric_table lists every metric: its group, name, and the statistic behind it.
This module keeps those statistics and reads them. Rates, averages and maxima are computed as
Kafka's client does: over ``metrics.num.samples`` windows of ``metrics.sample.window.ms`` each
(the oldest window is dropped as a new one starts), so they describe the last ``num × window``
of activity, not the whole life; ``-total`` values cover the consumer's life. Everything is
recorded per request, per fetch answer, per record set, per poll, per commit or per
rebalance, never per record: the per-record path pays nothing. What every fetch round records
(requests, responses, network polls, Fetch answers, polls) is appended to a list with its
timestamp, and folded into the statistics in bulk (every ``_FOLD_EVENTS`` events, and before
anything is read): the same statistics, values and windows as recording each at once.

Groups are returned as kafka-python's ``metrics()`` does, ``{group: {name: value}}``; a group
with Java tags carries them in its name (``consumer-node-metrics,node-id=node-1``,
``consumer-fetch-manager-metrics,topic=T,partition=P``).
"""
from __future__ import annotations

import threading
from collections.abc import Iterable

from kclient.consumer.metric_table import COORDINATOR, TABLE, MetricDef

__all__ = ["WindowedStat", "ConsumerMetrics", "collect"]

# Keys of client-wide statistics recorded every fetch round.
_REQUEST_SIZE, _RESPONSE_SIZE, _REQUEST_LATENCY, _NETWORK_IO = (
    ("", "request-size"), ("", "response-size"), ("", "request-latency"), ("", "network-io"))
_SELECT_WAIT, _IO = ("", "select-wait-ns"), ("", "io-ns")
_FETCH, _FETCH_THROTTLE, _FETCH_SIZE = ("", "fetch"), ("", "fetch-throttle"), ("", "fetch-size")
_RECORDS, _BYTES, _BETWEEN, _IDLE = ("", "records"), ("", "bytes"), ("", "time-between-poll"), ("", "poll-idle-ratio")

# The kinds of events appended per round (the tuple's first item), folded by ConsumerMetrics._fold.
_SENT, _RECEIVED, _NET_POLLED, _FETCHED, _POLL_GAP, _POLLED, _POLL_IDLE = range(7)
#: Events appended before they are folded into the statistics (under the lock, in one go).
_FOLD_EVENTS = 256


def _by_node(events: list[tuple], field: int, times: list, values: list) -> dict[int, tuple[list, list]]:
    """{node id: (values, times)} of ``events`` (node id second): the lists given when every
    event is of one node, as usual."""
    first = events[0][1]
    for e in events:
        if e[1] != first:
            break
    else:
        return {first: (values, times)}
    out: dict[int, tuple[list, list]] = {}
    for e in events:
        pair = out.get(e[1])
        if pair is None:
            pair = out[e[1]] = ([], [])
        pair[0].append(e[field])
        pair[1].append(e[-1])
    return out


class WindowedStat:
    """Count, sum, max and min of recorded values over the last ``samples`` windows."""

    __slots__ = ("_window_ms", "_samples", "_windows", "total_count", "total_sum")

    def __init__(self, window_ms: int, samples: int):
        self._window_ms = max(int(window_ms), 1)
        self._samples = max(int(samples), 1)
        self._windows: list[list[float]] = []      # [start_ms, count, sum, max, min]
        self.total_count = 0
        self.total_sum = 0.0

    def record(self, value: float, now_ms: int) -> None:
        ws = self._windows
        # In the current window (most calls): nothing to roll. Windows that ended are
        # dropped when the next one starts, and before every read.
        if not ws or now_ms - ws[-1][0] >= self._window_ms:
            self._roll(now_ms)
        w = ws[-1]
        n = w[1] + 1
        w[1] = n
        w[2] += value
        if n == 1:
            w[3] = w[4] = value
        elif value > w[3]:
            w[3] = value
        elif value < w[4]:      # not both: the minimum is at most the maximum
            w[4] = value
        self.total_count += 1
        self.total_sum += value

    def record_many(self, values: list, now_ms: int) -> None:
        """``record(v, now_ms)`` for each of ``values`` (one window check for them all)."""
        if not values:
            return
        ws = self._windows
        if not ws or now_ms - ws[-1][0] >= self._window_ms:
            self._roll(now_ms)
        w = ws[-1]
        hi, lo, total, n = max(values), min(values), sum(values), len(values)
        if w[1] == 0:
            w[3], w[4] = hi, lo
        else:
            if hi > w[3]:
                w[3] = hi
            if lo < w[4]:
                w[4] = lo
        w[1] += n
        w[2] += total
        self.total_count += n
        self.total_sum += total

    def record_series(self, values: list, times: list) -> None:
        """``record(v, t)`` for each value and time, in order: one window check when they all
        fall into one window (the usual case), else one at a time."""
        ws = self._windows
        window = self._window_ms
        latest = max(times)
        if ws and latest - ws[-1][0] < window:
            self.record_many(values, latest)        # none starts a window
        elif latest - times[0] < window and (not ws or times[0] - ws[-1][0] >= window):
            self.record_many(values, times[0])      # the first starts one, the rest fall in it
        else:
            record = self.record
            for v, t in zip(values, times):
                record(v, t)

    def _roll(self, now_ms: int) -> None:
        ws = self._windows
        if not ws or now_ms - ws[-1][0] >= self._window_ms:
            ws.append([now_ms, 0, 0.0, 0.0, 0.0])
        # Drop windows that ended before the span measured now.
        horizon = now_ms - self._window_ms * self._samples
        while len(ws) > 1 and (ws[0][0] + self._window_ms <= horizon or len(ws) > self._samples):
            ws.pop(0)

    def _live(self, now_ms: int) -> list[list[float]]:
        self._roll(now_ms)
        return self._windows

    def span_s(self, now_ms: int) -> float:
        """Seconds the kept windows cover (at least one window)."""
        ws = self._live(now_ms)
        return max(now_ms - ws[0][0], self._window_ms) / 1000.0

    def window_count(self, now_ms: int) -> float:
        return sum(w[1] for w in self._live(now_ms))

    def window_sum(self, now_ms: int) -> float:
        return sum(w[2] for w in self._live(now_ms))

    def rate(self, now_ms: int, of_sum: bool = False) -> float:
        """Per second, over the span the kept windows cover (at least one window)."""
        span = self.span_s(now_ms)
        return (self.window_sum(now_ms) if of_sum else self.window_count(now_ms)) / span

    def avg(self, now_ms: int) -> float:
        n = self.window_count(now_ms)
        return self.window_sum(now_ms) / n if n else 0.0

    def max(self, now_ms: int) -> float:
        ws = [w for w in self._live(now_ms) if w[1]]
        return max(w[3] for w in ws) if ws else 0.0

    def min(self, now_ms: int) -> float:
        ws = [w for w in self._live(now_ms) if w[1]]
        return min(w[4] for w in ws) if ws else 0.0


class ConsumerMetrics:
    """The recorded statistics of one consumer, by source name (the table's ``source``), for
    the whole client or one scope (a node id, a topic). Thread-safe: the application thread,
    the heartbeat thread and the network client record."""

    def __init__(self, window_ms: int = 30000, samples: int = 2):
        self._lock = threading.Lock()
        self._window_ms = window_ms
        self._samples = samples
        self._stats: dict[tuple, WindowedStat] = {}
        self.last_poll_start_ms: int | None = None
        self._last_poll_end_ms: int | None = None
        # Each fetch round's events (request, response, network poll, Fetch answer, poll),
        # appended without the lock by whichever thread records them (an append is atomic),
        # and folded into the statistics, with their timestamps, under the lock: when
        # _FOLD_EVENTS are pending, and before any read. So a round takes this lock rarely,
        # not four or five times, and its dozens of values go in with a few calls.
        self._events: list[tuple] = []
        self.last_rebalance_ms: int | None = None
        # Per partition: its scope and its records-lag and records-lead statistics (the
        # latter made at its first value), so a poll formats no scope strings.
        self._partition_stats: dict[tuple[str, int], list] = {}
        self._topic_stats: dict[str, tuple[WindowedStat, WindowedStat]] = {}   # records, bytes
        # Per node id: its scope's request-size, response-size and request-latency statistics,
        # so the per-request records format no scope strings.
        self._node_stats: dict[int, tuple[WindowedStat, WindowedStat, WindowedStat]] = {}

    def _stat(self, key: tuple) -> WindowedStat:
        s = self._stats.get(key)
        if s is None:
            s = self._stats[key] = WindowedStat(self._window_ms, self._samples)
        return s

    def record(self, source: str, value: float, now_ms: int) -> None:
        with self._lock:
            self._fold()    # what was appended before goes in first
            self._stat(("", source)).record(value, now_ms)

    def record_node(self, node_id: int, source: str, value: float, now_ms: int) -> None:
        """Both the client-wide statistic and the node's."""
        with self._lock:
            self._fold()
            self._stat(("", source)).record(value, now_ms)
            self._stat((f"node-id=node-{node_id}", source)).record(value, now_ms)

    def _node(self, node_id: int) -> tuple[WindowedStat, WindowedStat, WindowedStat]:
        stats = self._node_stats.get(node_id)
        if stats is None:
            scope = f"node-id=node-{node_id}"
            stats = self._node_stats[node_id] = (self._stat((scope, "request-size")),
                                                 self._stat((scope, "response-size")),
                                                 self._stat((scope, "request-latency")))
        return stats

    # What the network client and the fetcher record per request, response and network poll,
    # and the consumer per poll: appended as events, folded later (see ``_events``).
    def _append(self, event: tuple) -> None:
        events = self._events
        events.append(event)
        if len(events) >= _FOLD_EVENTS:
            with self._lock:
                self._fold()

    def request_sent(self, node_id: int, size: int, now_ms: int) -> None:
        """A request of ``size`` bytes went to the node: request-size (client and node), network-io."""
        self._append((_SENT, node_id, size, now_ms))

    def response_received(self, node_id: int, size: int, latency_ms: int, now_ms: int) -> None:
        """A response of ``size`` bytes came from the node, ``latency_ms`` after its request:
        response-size and request-latency (client and node), network-io."""
        self._append((_RECEIVED, node_id, size, latency_ms, now_ms))

    def network_polled(self, select_wait_ns: int, io_ns: int, now_ms: int) -> None:
        """One network poll: the ns its select() waited and its socket I/O took."""
        self._append((_NET_POLLED, select_wait_ns, io_ns, now_ms))

    def fetch_answered(self, latency_ms: float, throttle_ms: float | None, size: int | None, now_ms: int) -> None:
        """A Fetch answer (or failure) ``latency_ms`` after its request: fetch; with the
        answer's throttle time, fetch-throttle; with the bytes of record data it returned
        (an answer without errors), fetch-size."""
        self._append((_FETCHED, latency_ms, throttle_ms, size, now_ms))

    def record_sets(self, sets: Iterable[tuple[str, int, int]], now_ms: int) -> None:
        """Record sets fully handed out: (topic, records, bytes) each."""
        with self._lock:
            self._fold()
            self._record_sets(sets, now_ms)

    def record_positions(self, positions: Iterable[tuple[str, int, int, int | None]], now_ms: int) -> None:
        """Where polls left partitions: (topic, partition, lag, lead or None) each."""
        with self._lock:
            self._fold()
            self._record_positions(positions, now_ms)

    def polled(self, records: int, nbytes: int, sets: list[tuple[str, int, int]],
               positions: list[tuple[str, int, int, int | None]], now_ms: int,
               gap: tuple[int, int] | None = None) -> None:
        """What one poll handed out: its records (``consumed``), the bytes and record sets it
        finished (``consumed_bytes``, ``record_sets``), and where it left each partition
        (``record_positions``); with ``gap``, the poll's (time-between-poll, start time) as
        ``poll_gap`` gave them, in the same event."""
        self._append((_POLLED, records, nbytes, sets, positions, now_ms, gap))

    def flush(self) -> None:
        """Fold every event appended so far into the statistics."""
        if self._events:
            with self._lock:
                self._fold()

    def _fold(self) -> None:
        """With the lock held: the events appended so far, into their statistics, in order
        (each statistic's values in one ``record_series`` call)."""
        events = self._events
        n = len(events)
        if not n:
            return
        batch = events[:n]
        del events[:n]      # only the lock's holder removes: appends meanwhile stay
        by_kind: list[list[tuple]] = [[] for _ in range(_POLL_IDLE + 1)]
        gaps = by_kind[_POLL_GAP]
        for event in batch:
            kind = event[0]
            by_kind[kind].append(event)
            if kind == _POLLED and event[6] is not None:
                gaps.append((_POLL_GAP, *event[6]))     # a poll's gap came with what it handed out
        sent, received, net_polled, fetched, gaps, polled, idle = by_kind
        stat = self._stat
        if sent or received:
            # network-io counts both, in the order they happened.
            times = [e[-1] for e in batch if e[0] == _SENT or e[0] == _RECEIVED]
            stat(_NETWORK_IO).record_series([1] * len(times), times)
        if sent:
            times = [e[3] for e in sent]
            sizes = [e[2] for e in sent]
            stat(_REQUEST_SIZE).record_series(sizes, times)
            for node_id, (values, at) in _by_node(sent, 2, times, sizes).items():
                self._node(node_id)[0].record_series(values, at)
        if received:
            times = [e[4] for e in received]
            sizes = [e[2] for e in received]
            latencies = [e[3] for e in received]
            stat(_RESPONSE_SIZE).record_series(sizes, times)
            stat(_REQUEST_LATENCY).record_series(latencies, times)
            for node_id, (values, at) in _by_node(received, 2, times, sizes).items():
                self._node(node_id)[1].record_series(values, at)
            for node_id, (values, at) in _by_node(received, 3, times, latencies).items():
                self._node(node_id)[2].record_series(values, at)
        if net_polled:
            times = [e[3] for e in net_polled]
            stat(_SELECT_WAIT).record_series([e[1] for e in net_polled], times)
            stat(_IO).record_series([e[2] for e in net_polled], times)
        if fetched:
            stat(_FETCH).record_series([e[1] for e in fetched], [e[4] for e in fetched])
            throttled = [e for e in fetched if e[2] is not None]
            if throttled:
                stat(_FETCH_THROTTLE).record_series([e[2] for e in throttled], [e[4] for e in throttled])
            sized = [e for e in fetched if e[3] is not None]
            if sized:
                stat(_FETCH_SIZE).record_series([e[3] for e in sized], [e[4] for e in sized])
        if polled:
            self._fold_polls(polled)
        if gaps:
            stat(_BETWEEN).record_series([e[1] for e in gaps], [e[2] for e in gaps])
        if idle:
            ratio = stat(_IDLE)
            for e in idle:      # floats: one by one, summed as they always were
                ratio.record(e[1], e[2])

    def _fold_polls(self, polled: list[tuple]) -> None:
        """What polls handed out (``polled``' arguments, in order), into their statistics."""
        stat = self._stat
        times = [e[5] for e in polled]
        stat(_RECORDS).record_series([e[1] for e in polled], times)
        with_bytes = [e for e in polled if e[2]]
        if with_bytes:
            stat(_BYTES).record_series([e[2] for e in with_bytes], [e[5] for e in with_bytes])
        per_topic: dict[str, tuple[list, list, list]] = {}       # counts, sizes, times
        per_partition: dict[tuple[str, int], tuple[list, list, list, list]] = {}   # lags, times, leads, times
        for e in polled:
            sets, positions, now_ms = e[3], e[4], e[5]
            for topic, count, size in sets:
                t = per_topic.get(topic)
                if t is None:
                    t = per_topic[topic] = ([], [], [])
                t[0].append(count)
                t[1].append(size)
                t[2].append(now_ms)
            for topic, partition, lag, lead in positions:
                p = per_partition.get((topic, partition))
                if p is None:
                    p = per_partition[(topic, partition)] = ([], [], [], [])
                p[0].append(lag)
                p[1].append(now_ms)
                if lead is not None:
                    p[2].append(lead)
                    p[3].append(now_ms)
        for topic, (counts, sizes, at) in per_topic.items():
            stats = self._topic(topic)
            stats[0].record_series(counts, at)
            stats[1].record_series(sizes, at)
        for (topic, partition), (lags, at, leads, lead_at) in per_partition.items():
            entry = self._partition(topic, partition)
            entry[1].record_series(lags, at)
            if leads:
                lead_stat = entry[2]
                if lead_stat is None:
                    lead_stat = entry[2] = stat((entry[0], "records-lead"))
                lead_stat.record_series(leads, lead_at)

    def _topic(self, topic: str) -> tuple[WindowedStat, WindowedStat]:
        stats = self._topic_stats.get(topic)
        if stats is None:
            scope = f"topic={topic}"
            stats = self._topic_stats[topic] = (self._stat((scope, "records")), self._stat((scope, "bytes")))
        return stats

    def _partition(self, topic: str, partition: int) -> list:
        entry = self._partition_stats.get((topic, partition))
        if entry is None:
            scope = f"topic={topic},partition={partition}"
            entry = self._partition_stats[(topic, partition)] = [scope, self._stat((scope, "records-lag")), None]
        return entry

    def _record_sets(self, sets, now_ms: int) -> None:
        # A poll's record sets are mostly of one topic: its values go in with one call per
        # statistic.
        by_topic: dict[str, tuple[list, list]] = {}
        for topic, n, size in sets:
            values = by_topic.get(topic)
            if values is None:
                values = by_topic[topic] = ([], [])
            values[0].append(n)
            values[1].append(size)
        for topic, (counts, sizes) in by_topic.items():
            stats = self._topic(topic)
            stats[0].record_many(counts, now_ms)
            stats[1].record_many(sizes, now_ms)

    def _record_positions(self, positions, now_ms: int) -> None:
        for topic, partition, lag, lead in positions:
            entry = self._partition(topic, partition)
            entry[1].record(lag, now_ms)
            if lead is not None:
                lead_stat = entry[2]
                if lead_stat is None:
                    lead_stat = entry[2] = self._stat((entry[0], "records-lead"))
                lead_stat.record(lead, now_ms)

    # The names the fetch and group layers have always called.
    def fetch_done(self, latency_ms: float, now_ms: int) -> None:
        self.record("fetch", latency_ms, now_ms)

    def consumed(self, records: int, now_ms: int) -> None:
        self.record("records", records, now_ms)

    def consumed_bytes(self, nbytes: int, now_ms: int) -> None:
        self.record("bytes", nbytes, now_ms)

    def commit_done(self, latency_ms: float, now_ms: int) -> None:
        self.record("commit", latency_ms, now_ms)

    def rebalance_done(self, latency_ms: float, now_ms: int) -> None:
        self.record("rebalance", latency_ms, now_ms)
        self.last_rebalance_ms = now_ms

    def poll_started(self, now_ms: int) -> None:
        """A poll starts: its time-between-poll. Called by the consumer's thread only."""
        gap = self.poll_gap(now_ms)
        if gap is not None:
            self.record_poll_gap(gap)

    def poll_gap(self, now_ms: int) -> tuple[int, int] | None:
        """A poll starts (the consumer's thread only): its (time-between-poll, start time),
        not recorded yet: the caller passes it to ``polled`` with what the poll handed out,
        one event for both, or to ``record_poll_gap`` if the poll hands out nothing."""
        last = self.last_poll_start_ms
        self.last_poll_start_ms = now_ms
        return None if last is None else (now_ms - last, now_ms)

    def record_poll_gap(self, gap: tuple[int, int]) -> None:
        self._append((_POLL_GAP, gap[0], gap[1]))

    def poll_ended(self, now_ms: int) -> None:
        """The share of the time since the previous poll() ended that this one took."""
        start, prev_end = self.last_poll_start_ms, self._last_poll_end_ms
        if start is not None and prev_end is not None and now_ms > prev_end:
            self._append((_POLL_IDLE, min((now_ms - start) / (now_ms - prev_end), 1.0), now_ms))
        self._last_poll_end_ms = now_ms

    def scopes(self, tag: str) -> list[str]:
        """The scopes recorded with this tag first (e.g. ``node-id=node-1``)."""
        with self._lock:
            self._fold()
            return sorted({scope for scope, _ in self._stats if scope.startswith(tag + "=")})

    def read(self, m: MetricDef, scope: str, now_ms: int) -> float:
        """The value of a statistic-backed metric in a scope ("" for the whole client)."""
        with self._lock:
            self._fold()
            if m.reading == "per":
                top, bottom = m.source.split("/")
                a, b = self._stats.get((scope, top)), self._stats.get((scope, bottom))
                n = 0.0 if b is None else b.window_count(now_ms)
                return (a.window_sum(now_ms) / n) if a is not None and n else 0.0
            s = self._stats.get((scope, m.source))
            if s is None:
                return 0 if m.reading in ("total", "total_sum") else 0.0
            r = m.reading
            if r == "rate":
                return s.rate(now_ms)
            if r == "rate_sum":
                return s.rate(now_ms, of_sum=True)
            if r == "total":
                return s.total_count
            if r == "total_sum":
                return s.total_sum
            if r == "avg":
                return s.avg(now_ms)
            if r == "max":
                return s.max(now_ms)
            if r == "min":
                return s.min(now_ms)
            if r == "per_hour":
                return s.rate(now_ms) * 3600.0
            if r == "ratio_ns":
                return s.window_sum(now_ms) / (s.span_s(now_ms) * 1e9)
            raise ValueError(f"unknown reading {r!r} of {m.name}")


def collect(stats: ConsumerMetrics, gauges: dict[str, dict[str, float]], now_ms: int, *,
            group_member: bool, classic_member: bool) -> dict[str, dict[str, float]]:
    """``{group: {name: value}}`` for every metric of the table: statistics from ``stats``,
    gauges from ``gauges`` (keyed by the group's name with its tags). Tagged groups appear
    for each scope recorded or given (partitions: given); the coordinator's only for a group
    member, and its recorded statistics only for a classic member (the one that records them)."""
    out: dict[str, dict[str, float]] = {}
    scopes_by_tag: dict[str, list[str]] = {}
    for m in TABLE:
        if m.group == COORDINATOR and (not group_member or (m.reading != "gauge" and not classic_member)):
            continue
        if m.tags:
            first = m.tags[0]
            scopes = scopes_by_tag.get(m.group_key)
            if scopes is None:
                given = {g[len(m.group) + 1:] for g in gauges if g.startswith(m.group + ",")
                         and g.count("=") == len(m.tags)}
                # Partitions: the assigned ones (their gauges), not every one ever recorded.
                recorded = set() if "partition" in m.tags else {
                    s for s in stats.scopes(first) if s.count("=") == len(m.tags)}
                scopes = scopes_by_tag[m.group_key] = sorted(recorded | given)
        else:
            scopes = [""]
        for scope in scopes:
            group = f"{m.group},{scope}" if scope else m.group
            if m.reading == "gauge":
                value = gauges.get(group, {}).get(m.source)
                if value is None:
                    continue
            else:
                value = stats.read(m, scope, now_ms)
            out.setdefault(group, {})[m.name] = value
    return out

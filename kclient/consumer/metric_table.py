"""The consumer's metrics, one row each: the single source of ``KafkaConsumer.metrics()``'s
names, of the names pushed to the broker (KIP-714) and of docs/metrics.md.

A row names its Java group and metric, the statistic that backs it and how that statistic is
read (``source``/``reading``; see kclient.consumer.metrics), what it means and how kclient
measures it. Metrics of the Java consumer that kclient cannot measure are in ``ABSENT`` with
the reason: they are left out of ``metrics()`` rather than reported as a made-up value.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MetricDef", "TABLE", "ABSENT", "GROUP_TAGS", "CLIENT", "COORDINATOR", "FETCH", "NODE"]

CLIENT = "consumer-metrics"
COORDINATOR = "consumer-coordinator-metrics"
FETCH = "consumer-fetch-manager-metrics"
NODE = "consumer-node-metrics"


@dataclass(frozen=True)
class MetricDef:
    group: str
    name: str
    source: str          # the statistic (or gauge) behind the value
    reading: str         # rate, rate_sum, total, total_sum, avg, max, min, per_hour, ratio_ns, per, gauge
    description: str
    measured: str
    tags: tuple[str, ...] = ()   # Java's tags besides client-id: node-id, topic, partition
    java: bool = True            # False: kclient's own metric, not one of the Java client's

    @property
    def kind(self) -> str:
        """OTLP type: cumulative ``-total`` counters are sums, everything else a gauge."""
        return "sum" if self.name.endswith("-total") else "gauge"

    @property
    def group_key(self) -> str:
        """The group with its tag names, as the comparison with the Java client lists it."""
        return self.group + "".join(f",{t}" for t in sorted(self.tags))


_T = ("topic",)
_TP = ("topic", "partition")
_N = ("node-id",)
_NET = "the network client, per request frame sent"
_RSP = "the network client, per response frame received"


def _pair(group: str, base: str, source: str, what: str, measured: str, tags: tuple[str, ...] = (),
          sum_of: bool = False) -> list[MetricDef]:
    """``<base>-rate`` and ``<base>-total`` of one statistic (counts, or sums of values)."""
    return [MetricDef(group, f"{base}-rate", source, "rate_sum" if sum_of else "rate", f"{what} per second",
                      measured, tags),
            MetricDef(group, f"{base}-total", source, "total_sum" if sum_of else "total", f"{what} in total",
                      measured, tags)]


def _avg_max(group: str, base: str, source: str, what: str, measured: str,
             tags: tuple[str, ...] = ()) -> list[MetricDef]:
    return [MetricDef(group, f"{base}-avg", source, "avg", f"average {what}", measured, tags),
            MetricDef(group, f"{base}-max", source, "max", f"largest {what}", measured, tags)]


TABLE: list[MetricDef] = [
    # ------------------------------------------------------------------ consumer-metrics
    MetricDef(CLIENT, "connection-count", "connection-count", "gauge", "open broker connections",
              "connections not disconnected, when metrics() is read"),
    *_pair(CLIENT, "connection-creation", "connection-creation", "connections opened",
           "the network client, per connection attempt started"),
    *_pair(CLIENT, "connection-close", "connection-close", "connections closed",
           "the network client, per connection closed (by either side or after a failure)"),
    *_pair(CLIENT, "successful-authentication", "authenticated",
           "connections that completed their handshake (ApiVersions, TLS and SASL when configured)",
           "the network client, when a connection becomes ready"),
    *_pair(CLIENT, "failed-authentication", "failed-authentication",
           "connections closed because their TLS handshake or SASL authentication failed",
           "the authenticator, when it gives up a connection's set-up"),
    *_pair(CLIENT, "successful-reauthentication", "reauthentication",
           "KIP-368 re-authentications completed on open connections", "the authenticator, per re-authentication"),
    *_avg_max(CLIENT, "reauthentication-latency", "reauthentication", "ms a re-authentication took",
              "clock when it started and when the broker accepted it"),
    *_pair(CLIENT, "failed-reauthentication", "failed-reauthentication",
           "re-authentications that failed (the connection is closed)", "the authenticator, per failure"),
    *_pair(CLIENT, "request", "request-size", "requests sent", _NET),
    *_avg_max(CLIENT, "request-size", "request-size", "request size in bytes", _NET),
    *_pair(CLIENT, "outgoing-byte", "request-size", "bytes sent", _NET, sum_of=True),
    *_pair(CLIENT, "response", "response-size", "responses received", _RSP),
    *_pair(CLIENT, "incoming-byte", "response-size", "bytes received", _RSP, sum_of=True),
    *_pair(CLIENT, "network-io", "network-io", "requests sent and responses received",
           "the network client, per frame sent or received"),
    *_pair(CLIENT, "select", "select-wait-ns", "waits for socket readiness (select calls)",
           "the network client, per select() call"),
    MetricDef(CLIENT, "io-wait-time-ns-avg", "select-wait-ns", "avg", "average ns a select() waited",
              "monotonic clock around each select()"),
    MetricDef(CLIENT, "io-wait-time-ns-total", "select-wait-ns", "total_sum", "ns spent waiting in select()",
              "monotonic clock around each select()"),
    MetricDef(CLIENT, "io-wait-ratio", "select-wait-ns", "ratio_ns",
              "fraction of the time spent waiting in select()", "waited ns over the windows' span"),
    MetricDef(CLIENT, "io-time-ns-avg", "io-ns", "avg", "average ns of socket I/O after a select()",
              "monotonic clock around the handling of each select()'s events (reads, writes, frames)"),
    MetricDef(CLIENT, "io-time-ns-total", "io-ns", "total_sum", "ns spent in socket I/O",
              "monotonic clock around the handling of each select()'s events"),
    MetricDef(CLIENT, "io-ratio", "io-ns", "ratio_ns", "fraction of the time spent in socket I/O",
              "I/O ns over the windows' span"),
    MetricDef(CLIENT, "last-poll-seconds-ago", "last-poll-seconds-ago", "gauge",
              "seconds since the last poll() (-1: none yet)", "clock at the start of each poll()"),
    *_avg_max(CLIENT, "time-between-poll", "time-between-poll", "ms between two poll() calls",
              "clock at the start of each poll()"),
    MetricDef(CLIENT, "poll-idle-ratio-avg", "poll-idle-ratio", "avg",
              "average fraction of the time spent inside poll() (as opposed to in the application)",
              "at the end of each poll(): its duration over the time since the previous poll() ended"),
    MetricDef(CLIENT, "commit-sync-time-ns-total", "commit-sync-ns", "total_sum", "ns spent in commit()",
              "monotonic clock around each synchronous commit()"),
    MetricDef(CLIENT, "committed-time-ns-total", "committed-ns", "total_sum", "ns spent in committed()",
              "monotonic clock around each committed()"),
    MetricDef(CLIENT, "assigned-partitions", "assigned-partitions", "gauge",
              "partitions assigned (also for manual assignment)", "when metrics() is read", java=False),
    # ------------------------------------------------------------------ consumer-coordinator-metrics
    *_pair(COORDINATOR, "heartbeat", "heartbeat", "heartbeat answers", "per Heartbeat answer"),
    MetricDef(COORDINATOR, "heartbeat-response-time-max", "heartbeat", "max", "largest ms from a Heartbeat to its answer",
              "clock at send and at the answer"),
    MetricDef(COORDINATOR, "last-heartbeat-seconds-ago", "last-heartbeat-seconds-ago", "gauge",
              "seconds since the last heartbeat answer (-1: none yet)", "the heartbeat timing state"),
    *_pair(COORDINATOR, "join", "join", "JoinGroup answers", "per JoinGroup answer"),
    *_avg_max(COORDINATOR, "join-time", "join", "ms from a JoinGroup to its answer", "clock at send and at the answer"),
    *_pair(COORDINATOR, "sync", "sync", "SyncGroup answers", "per SyncGroup answer"),
    *_avg_max(COORDINATOR, "sync-time", "sync", "ms from a SyncGroup to its answer", "clock at send and at the answer"),
    *_pair(COORDINATOR, "commit", "commit", "OffsetCommit answers", "per OffsetCommit answer"),
    *_avg_max(COORDINATOR, "commit-latency", "commit", "ms from an OffsetCommit to its answer",
              "clock at send and at the answer"),
    MetricDef(COORDINATOR, "rebalance-total", "rebalance", "total", "rebalances completed",
              "once the member is stable after a join"),
    MetricDef(COORDINATOR, "rebalance-rate-per-hour", "rebalance", "per_hour", "rebalances completed per hour",
              "once the member is stable after a join"),
    *_avg_max(COORDINATOR, "rebalance-latency", "rebalance", "ms from the first JoinGroup to a stable member",
              "clock at the first JoinGroup and when SyncGroup succeeded"),
    MetricDef(COORDINATOR, "rebalance-latency-total", "rebalance", "total_sum", "ms spent rebalancing",
              "clock at the first JoinGroup and when SyncGroup succeeded"),
    MetricDef(COORDINATOR, "failed-rebalance-total", "failed-rebalance", "total", "joins that failed",
              "per failed JoinGroup or SyncGroup"),
    MetricDef(COORDINATOR, "failed-rebalance-rate-per-hour", "failed-rebalance", "per_hour",
              "joins that failed, per hour", "per failed JoinGroup or SyncGroup"),
    MetricDef(COORDINATOR, "last-rebalance-seconds-ago", "last-rebalance-seconds-ago", "gauge",
              "seconds since the last completed rebalance (-1: none yet)", "clock when a rebalance completed"),
    *[m for what in ("assigned", "revoked", "lost")
      for m in _avg_max(COORDINATOR, f"partition-{what}-latency", f"partition-{what}",
                        f"ms the rebalance listener's on_partitions_{what} took",
                        "clock around each call (also when no listener is set)")],
    MetricDef(COORDINATOR, "assigned-partitions", "assigned-partitions", "gauge", "partitions assigned to this member",
              "when metrics() is read"),
    # ------------------------------------------------------------------ consumer-fetch-manager-metrics
    *_pair(FETCH, "fetch", "fetch", "Fetch answers", "per Fetch answer (or failure)"),
    *_avg_max(FETCH, "fetch-latency", "fetch", "ms from a Fetch to its answer", "clock at send and at the answer"),
    *_avg_max(FETCH, "fetch-size", "fetch-size", "bytes of record data per Fetch answer",
              "per Fetch answer: the record sets' bytes"),
    *_avg_max(FETCH, "fetch-throttle-time", "fetch-throttle", "throttle time in ms a Fetch answer asked for",
              "per Fetch answer: its throttle_time_ms"),
    *_pair(FETCH, "records-consumed", "records", "records returned by poll()", "per poll: the records it returned",
           sum_of=True),
    *_pair(FETCH, "bytes-consumed", "bytes", "bytes of the record sets returned by poll()",
           "per record set fully handed out: its bytes", sum_of=True),
    MetricDef(FETCH, "records-per-request-avg", "records/fetch", "per", "records returned per Fetch answer",
              "records returned by poll() over Fetch answers, in the same windows"),
    MetricDef(FETCH, "records-lag-max", "records-lag-max", "gauge", "the largest records-lag of the assigned partitions",
              "from the partitions' lag when metrics() is read"),
    MetricDef(FETCH, "records-lead-min", "records-lead-min", "gauge", "the smallest records-lead of the assigned partitions",
              "from the partitions' lead when metrics() is read"),
    *_pair(FETCH, "records-consumed", "records", "records of the topic returned by poll()",
           "per record set fully handed out: its records", tags=_T, sum_of=True),
    *_pair(FETCH, "bytes-consumed", "bytes", "bytes of the topic's record sets returned by poll()",
           "per record set fully handed out: its bytes", tags=_T, sum_of=True),
    *_avg_max(FETCH, "fetch-size", "bytes", "bytes of one record set of the topic",
              "per record set fully handed out: its bytes", tags=_T),
    MetricDef(FETCH, "records-per-request-avg", "records", "avg", "records per record set of the topic",
              "per record set fully handed out: its records", _T),
    MetricDef(FETCH, "records-lag", "records-lag", "gauge",
              "records between the position and the high watermark (the last stable offset with read_committed)",
              "as of the last Fetch answer of the partition", _TP),
    MetricDef(FETCH, "records-lead", "records-lead", "gauge", "records between the log start offset and the position",
              "as of the last Fetch answer of the partition", _TP),
    MetricDef(FETCH, "records-lag-avg", "records-lag", "avg", "average records-lag after a poll",
              "per poll that returned records of the partition: the end offset of its last answer less the position",
              _TP),
    MetricDef(FETCH, "records-lag-max", "records-lag", "max", "largest records-lag after a poll",
              "per poll that returned records of the partition", _TP),
    MetricDef(FETCH, "records-lead-avg", "records-lead", "avg", "average records-lead after a poll",
              "per poll that returned records of the partition: the position less the log start offset", _TP),
    MetricDef(FETCH, "records-lead-min", "records-lead", "min", "smallest records-lead after a poll",
              "per poll that returned records of the partition", _TP),
    MetricDef(FETCH, "preferred-read-replica", "preferred-read-replica", "gauge",
              "the follower the partition is fetched from (-1: the leader)",
              "the fetcher's choice (KIP-392) when metrics() is read", _TP),
    MetricDef(FETCH, "bytes-fetched-total", "bytes-fetched-total", "gauge", "bytes of record data received",
              "per Fetch answer", java=False),
    MetricDef(FETCH, "buffered-bytes", "buffered-bytes", "gauge", "bytes of fetched data held for poll()",
              "when metrics() is read", java=False),
    MetricDef(FETCH, "fetches-in-flight", "fetches-in-flight", "gauge", "Fetch requests outstanding",
              "when metrics() is read", java=False),
    # ------------------------------------------------------------------ consumer-node-metrics
    *_pair(NODE, "request", "request-size", "requests sent to the node", _NET, _N),
    *_avg_max(NODE, "request-size", "request-size", "request size in bytes", _NET, _N),
    *_pair(NODE, "outgoing-byte", "request-size", "bytes sent to the node", _NET, _N, sum_of=True),
    *_pair(NODE, "response", "response-size", "responses received from the node", _RSP, _N),
    *_pair(NODE, "incoming-byte", "response-size", "bytes received from the node", _RSP, _N, sum_of=True),
    *_avg_max(NODE, "request-latency", "request-latency", "ms from a request to its answer",
              "the network client: clock when the request was sent and when its answer arrived", _N),
]

#: Metrics of the Java consumer kclient leaves out, and why.
ABSENT: list[tuple[str, str, str]] = [
    (CLIENT, "successful-authentication-no-reauth-total",
     "counts peers that cannot re-authenticate (KIP-368), a broker's view of its clients; kclient always can"),
    ("app-info", "version, commit-id, start-time-ms", "not a metrics group of kclient (kclient.__version__)"),
    ("kafka-metrics-count", "count", "not a metric of the consumer"),
]

#: group -> its tag names, for every group of the table.
GROUP_TAGS: dict[str, tuple[str, ...]] = {}
for _m in TABLE:
    GROUP_TAGS.setdefault(_m.group_key, _m.tags)

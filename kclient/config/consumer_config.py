"""The consumer's settings (Kafka's ``ConsumerConfig``): its table and its checked values.

``CONSUMER_CONFIGS`` is the consumer's table: the settings every client takes
(``common_client_defs()``) and the consumer's own, with kafka-python's keywords for them;
``define()`` adds to it or replaces a definition. ``ConsumerConfig`` is a user's settings
checked against it, which ``KafkaConsumer`` builds once and turns into each component's typed
config (``kclient.consumer.consumer_settings.ConsumerSettings``).
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Mapping

from kclient.config.common_client_configs import common_client_defs
from kclient.config.config_def import (AbstractConfig, ClientConfig, ConfigDef, ConfigRegistry, callable_or_none,
                                       plugin)
from kclient.config.durations import BY_DURATION_PREFIX, by_duration_ms
from kclient.errors import ConfigurationError

__all__ = ["ConsumerConfig", "CONSUMER_CONFIGS", "IsolationLevel", "isolation_level", "define",
           "canonical_name", "as_config"]


class IsolationLevel(enum.IntEnum):
    """kafka-python 3's names for ``isolation_level`` (strings work too)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def isolation_level(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return ("read_uncommitted", "read_committed")[value]
    if isinstance(value, str) and value.strip().lower() in ("read_uncommitted", "read_committed"):
        return value.strip().lower()
    raise ConfigurationError(
        f"setting {name!r} must be 'read_uncommitted' or 'read_committed' (or IsolationLevel), got {value!r}")


_RESET_NAMES = ("latest", "earliest", "none", "smallest", "largest")


def auto_offset_reset(name: str, value: str) -> str:
    """earliest / latest / none (kafka-python's smallest / largest too), in any case, or
    ``by_duration:<ISO-8601 duration>`` with a duration of zero or more."""
    if by_duration_ms(value, name) is not None:
        return BY_DURATION_PREFIX + value.strip()[len(BY_DURATION_PREFIX):].strip()
    key = value.strip().lower()
    if key not in _RESET_NAMES:
        raise ConfigurationError(f"setting {name!r} must be one of {list(_RESET_NAMES)} or "
                                 f"by_duration:<ISO-8601 duration>, got {value!r}")
    return key


# Names, types and defaults as documented for the Kafka consumer (Kafka 3.x/4.x).
_CONSUMER_DEFS = [
    ConfigDef("client.rack", "str", "", doc="rack of the client, for fetching from the closest replica"),
    ConfigDef("group.id", "str", None, nullable=True,
              doc="the consumer group; without it there is no membership and no committed offsets"),
    ConfigDef("group.instance.id", "str", None, nullable=True,
              doc="static membership: a restart within session.timeout.ms keeps the partitions"),
    ConfigDef("group.protocol", "str", "classic", choices=("classic", "consumer"),
              doc="the group membership protocol: classic (JoinGroup/SyncGroup, client-side assignors) "
                  "or consumer (KIP-848, Kafka 4: ConsumerGroupHeartbeat, broker-side assignors)"),
    ConfigDef("group.remote.assignor", "str", None, nullable=True,
              doc="with group.protocol=consumer: the broker-side assignor (e.g. uniform, range); "
                  "None: the broker's default"),
    ConfigDef("key.deserializer", "object", None, validator=plugin("deserialize", "topic, data"),
              doc="bytes -> object, applied to every record's key (None: bytes)"),
    ConfigDef("value.deserializer", "object", None, validator=plugin("deserialize", "topic, data"),
              doc="bytes -> object, applied to every record's value (None: bytes)"),
    ConfigDef("fetch.min.bytes", "int", 1, min=0,
              doc="the broker answers a Fetch once it has this many bytes (or fetch.max.wait.ms passed)"),
    ConfigDef("fetch.max.bytes", "int", 52428800, min=0,
              doc="the most a Fetch answer may carry (all partitions); also bounds the answers buffered (about twice it; the position arrays kclient keeps for their records, about 45 bytes a record, come on top)"),
    ConfigDef("fetch.max.wait.ms", "int", 500, min=0,
              doc="how long the broker may hold a Fetch waiting for fetch.min.bytes"),
    ConfigDef("max.partition.fetch.bytes", "int", 1048576, min=0,
              doc="the most one partition contributes to a Fetch answer"),
    ConfigDef("fetch.max.in.flight.per.broker", "int", 1, min=1, max=16,
              doc="kclient: Fetch streams kept in flight to one broker, each for a fixed share of its "
                  "partitions and of fetch.max.bytes (so buffered data stays bounded the same), each "
                  "stream after the first on a connection of its own (a broker serves one request per "
                  "connection at a time); 1, as Java, because on loopback with the 64 KiB "
                  "receive.buffer.bytes 2 gained poll_columnar about 5% (medians of 5 runs, 8.9 to "
                  "9.3 M records/s), no clear change per record, and with receive.buffer.bytes=-1 "
                  "1 was fastest (docs/performance.md)"),
    ConfigDef("max.poll.records", "int", 500, min=1,
              doc="records one poll() returns at most, across partitions"),
    ConfigDef("max.poll.interval.ms", "int", 300000, min=1, max=2147483647,
              doc="the longest gap between poll() calls before the member leaves the group; "
                  "also JoinGroup's rebalance timeout"),
    ConfigDef("session.timeout.ms", "int", 45000, min=1, max=2147483647,
              doc="the coordinator evicts a member that has not heartbeated for this long"),
    ConfigDef("heartbeat.interval.ms", "int", 3000, min=1, max=2147483647,
              doc="must be lower than session.timeout.ms"),
    ConfigDef("enable.auto.commit", "bool", True,
              doc="commit the positions every auto.commit.interval.ms, on revocation and on close"),
    ConfigDef("auto.commit.interval.ms", "int", 5000, min=0, doc="how often positions are auto-committed"),
    ConfigDef("auto.offset.reset", "str", "latest", validator=auto_offset_reset,
              doc="where to start without a committed offset or out of range: earliest, latest, none (raise), "
                  "or by_duration:DURATION with an ISO-8601 duration PnDTnHnMn.nS (KIP-1106: the first record "
                  "no older than the duration, e.g. by_duration:PT1H or by_duration:P1DT2H; the end if none "
                  "is that recent); smallest and largest are kafka-python's names for earliest and latest"),
    ConfigDef("allow.auto.create.topics", "bool", True,
              doc="let Metadata requests create missing topics (if the broker allows it)"),
    ConfigDef("exclude.internal.topics", "bool", True,
              doc="keep internal topics such as __consumer_offsets out of pattern subscriptions"),
    ConfigDef("isolation.level", "object", "read_uncommitted", validator=isolation_level,
              doc="read_committed: only records of committed transactions (a string or IsolationLevel)"),
    ConfigDef("check.crcs", "bool", True, doc="verify each record batch's CRC32C"),
    ConfigDef("zero.copy.records", "bool", False,
              doc="kclient: each record's key and value as a read-only memoryview into the fetched "
                  "response (or its decompressed data) instead of a bytes copy; deserializers receive the "
                  "views. Saves a copy per record, which pays off from about 1 KB values. A view keeps the "
                  "memory it points into alive as long as it is referenced (up to a whole fetch answer, "
                  "fetch.max.bytes): keep bytes(record.value) rather than the record to hold one value long"),
    ConfigDef("partition.assignment.strategy", "list", ["range", "cooperative-sticky"],
              doc="assignors in preference order (names or assignor objects)"),
    ConfigDef("interceptor.classes", "list", [],
              doc="ConsumerInterceptor instances, classes or dotted names: on_consume / on_commit"),
    ConfigDef("default.api.timeout.ms", "int", 60000, min=0,
              doc="the timeout of blocking calls given none (committed, position, offsets lookups...)"),
    # kafka-python's consumer keywords (not Java settings)
    ConfigDef("consumer.timeout.ms", "float", math.inf, min=0,
              doc="iteration stops (StopIteration) after this long without a record"),
    ConfigDef("default.offset.commit.callback", "object", None, validator=callable_or_none,
              doc="callback(offsets, exception_or_None) for commit_async() without a callback"),
    ConfigDef("enable.incremental.fetch.sessions", "bool", True,
              doc="incremental fetch sessions (KIP-227): after the first Fetch to a broker, list only "
                  "partitions whose fetch position changed; false: every Fetch lists every partition"),
    ConfigDef("legacy.iterator", "bool", False, doc="ignored",
              no_effect="kclient has one iterator (iteration polls like poll())"),
    ConfigDef("metric.group.prefix", "str", "consumer",
              doc="kafka-python: accepted for compatibility; no effect",
              no_effect="metrics() names its groups itself"),
]

# The one default that differs from the Java consumer's: its 64 KiB receive buffer caps a
# fetch answer's throughput on loopback and fast links (measured: poll_columnar 17-40% slower),
# where kafka-python (receive_buffer_bytes=None) and librdkafka (socket.receive.buffer.bytes=0)
# leave the buffer to the OS's autotuning; -1 does the same. Java's 65536 is one setting away.
_RECEIVE_BUFFER_DOC = ("the socket's receive buffer; -1 (default): the OS's autotuned size, as kafka-python and "
                       "librdkafka leave it (the Java consumer sets 65536, which slows large fetches)")


# The consumer acts on enable.metrics.push; the producer and the admin client only accept it.
_METRICS_PUSH_DOC = ("push this consumer's metrics to the broker when a client-metrics subscription asks for "
                     "them (KIP-714; see docs/metrics.md)")


def _consumer_common_def(d: ConfigDef) -> ConfigDef:
    if d.name == "receive.buffer.bytes":
        return dataclasses.replace(d, default=-1, doc=_RECEIVE_BUFFER_DOC)
    if d.name == "enable.metrics.push":
        return dataclasses.replace(d, doc=_METRICS_PUSH_DOC, no_effect="", no_effect_ok=())
    return d


def _consumer_common_defs() -> list[ConfigDef]:
    return [_consumer_common_def(d) for d in common_client_defs()]


_CONSUMER_REGISTRY = ConfigRegistry(_consumer_common_defs() + _CONSUMER_DEFS)
#: The consumer's table, by dotted name.
CONSUMER_CONFIGS: dict[str, ConfigDef] = _CONSUMER_REGISTRY.defs
define = _CONSUMER_REGISTRY.define
canonical_name = _CONSUMER_REGISTRY.canonical_name


class ConsumerConfig(ClientConfig):
    """The consumer's checked settings (``CONSUMER_CONFIGS``)."""

    @classmethod
    def table(cls) -> ConfigRegistry:
        return _CONSUMER_REGISTRY


def as_config(config: Mapping[str, Any] | AbstractConfig | None, **kwargs: Any) -> AbstractConfig:
    """Checked settings from whatever the caller has: None or a dict (checked as a consumer's),
    or any client's checked settings (kept, with ``kwargs`` given anew if any)."""
    if isinstance(config, ClientConfig):
        return config.with_overrides(**kwargs) if kwargs else config
    if isinstance(config, AbstractConfig):
        if kwargs:
            raise ConfigurationError("settings checked against a table of their own take no overrides")
        return config
    return ConsumerConfig(config, **kwargs)

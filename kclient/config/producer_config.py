"""The producer's settings (Kafka's ``ProducerConfig``): its table and its checked values.

``PRODUCER_CONFIGS`` is the producer's table: the settings every client takes
(``common_client_defs()``, with Java's producer default for ``receive.buffer.bytes``) and the
producer's own. A consumer-only setting given to a producer fails, naming it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from kclient.config.common_client_configs import common_client_defs
from kclient.config.config_def import ClientConfig, ConfigDef, ConfigRegistry, plugin, unsupported
from kclient.errors import ConfigurationError

__all__ = ["ProducerConfig", "PRODUCER_CONFIGS", "CODECS"]

#: compression.type -> the codec id in a record batch's attributes.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _acks(name: str, value: Any) -> int:
    if isinstance(value, str):
        v = value.strip().lower()
        if v == "all":
            return -1
        try:
            value = int(v)
        except ValueError:
            raise ConfigurationError(f"setting {name!r} must be 'all', -1, 0 or 1, got {value!r}") from None
    if isinstance(value, bool) or value not in (-1, 0, 1):
        raise ConfigurationError(f"setting {name!r} must be 'all', -1, 0 or 1, got {value!r}")
    return int(value)


def _codec(name: str, value: Any) -> str:
    v = "none" if value is None else str(value).lower()
    if v not in CODECS:
        raise ConfigurationError(f"setting {name!r} must be one of {sorted(CODECS)}, got {value!r}")
    return v


PRODUCER_CONFIGS: list[ConfigDef] = [
    *(dataclasses.replace(d, default=32768) if d.name == "receive.buffer.bytes" else d   # Java's producer default
      for d in common_client_defs()),
    ConfigDef("acks", "object", 1, validator=_acks,
              doc="-1/'all': all in-sync replicas; 1: the leader; 0: no answer (kafka-python default 1)"),
    ConfigDef("linger.ms", "int", 0, min=0,
              doc="wait up to this long for more records to fill a batch (0: send at once)"),
    ConfigDef("batch.size", "int", 16384, min=0, doc="bytes per partition batch before it is sent"),
    ConfigDef("compression.type", "object", "none", validator=_codec, doc="none, gzip, snappy, lz4 or zstd"),
    ConfigDef("compression.level", "int", None, nullable=True,
              doc="the codec's level (None: the codec's default)"),
    ConfigDef("key.serializer", "object", None, validator=plugin("serialize", "topic, data"),
              doc="object -> bytes for keys (None: bytes given as is)"),
    ConfigDef("value.serializer", "object", None, validator=plugin("serialize", "topic, data"),
              doc="object -> bytes for values (None: bytes given as is)"),
    ConfigDef("partitioner", "object", None, validator=plugin("partition", "topic, key, ..."),
              doc="partitioner(key_bytes, all_partitions, available_partitions) -> partition, or a "
                  "kafka-python 3 Partitioner (partition(topic, key, key_bytes, value, value_bytes, cluster))"),
    ConfigDef("max.request.size", "int", 1048576, min=1, doc="the largest Produce request (and record) sent"),
    ConfigDef("buffer.memory", "long", 33554432, min=0,
              doc="bytes of records waiting to be sent before send() blocks"),
    ConfigDef("max.block.ms", "long", 60000, min=0,
              doc="how long send() may block for buffer space or metadata"),
    ConfigDef("retries", "int", 2147483647, min=0,
              doc="how often a failed batch is retried (within delivery.timeout.ms)"),
    ConfigDef("delivery.timeout.ms", "int", 120000, min=0,
              doc="a record fails if not acknowledged within this long of send()"),
    ConfigDef("allow.auto.create.topics", "bool", True,
              doc="let Metadata requests create missing topics (if the broker allows it)"),
    ConfigDef("enable.idempotence", "bool", False, validator=unsupported("not supported by this small producer")),
    ConfigDef("transactional.id", "str", None, nullable=True,
              validator=unsupported("transactions are not supported by this small producer")),
    ConfigDef("partitioner.ignore.keys", "bool", False,
              doc="spread keyed records like keyless ones instead of hashing the key"),
    ConfigDef("transaction.timeout.ms", "int", 60000,
              doc="accepted for compatibility; no effect (no transactions)",
              no_effect="it bounds transactions, which this producer does not support"),
]


class ProducerConfig(ClientConfig):
    """The producer's checked settings (``PRODUCER_CONFIGS``)."""

    @classmethod
    def table(cls) -> ConfigRegistry:
        # Built from the list each time: definitions replaced in it take effect at once.
        return ConfigRegistry(PRODUCER_CONFIGS, "producer")

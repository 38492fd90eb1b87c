"""kclient: a fast Kafka consumer for Python.

Public names are imported lazily (PEP 562) so that ``import kclient`` (or one submodule such
as ``kclient.errors``) stays cheap and does not pull in the whole consumer. Type checkers read
them from ``__init__.pyi``, which imports each from its module.
"""
from __future__ import annotations

import importlib
import logging

__version__ = "0.1.0"

# Quiet by default: applications opt in to kclient's log output.
logging.getLogger("kclient").addHandler(logging.NullHandler())

_LAZY = {
    "TopicPartition": "kclient.structs",
    "OffsetAndMetadata": "kclient.structs",
    "OffsetAndTimestamp": "kclient.structs",
    "ConsumerRecord": "kclient.structs",
    "ConsumerRebalanceListener": "kclient.subscription.listener",
    "KafkaConsumer": "kclient.consumer.kafka_consumer",
    "IsolationLevel": "kclient.consumer.kafka_consumer",
    "KafkaProducer": "kclient.producer",
    "RecordMetadata": "kclient.producer",
    "KafkaAdminClient": "kclient.admin",
    "NewTopic": "kclient.admin",
    "NewPartitions": "kclient.admin",
    "OffsetSpec": "kclient.admin",
    "Serializer": "kclient.consumer.deserializers",
    "Deserializer": "kclient.consumer.deserializers",
    "DefaultSerializer": "kclient.consumer.deserializers",
    "JsonSerializer": "kclient.consumer.deserializers",
    "ColumnarRecords": "kclient.consumer.columnar",
    "ConsumerInterceptor": "kclient.consumer.interceptors",
    "KafkaShareConsumer": "kclient.share.consumer",
    "AcknowledgeType": "kclient.share.acknowledgements",
    "ShareColumnarRecords": "kclient.share.columnar",
}

__all__ = sorted(_LAZY)  # noqa: PLE0605 (the lazily imported names are the public ones)


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kclient' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value

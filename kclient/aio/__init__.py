"""kclient.aio: aiokafka's asyncio API over kclient's compiled core.

``from kclient.aio import AIOKafkaConsumer, AIOKafkaProducer`` in place of aiokafka's import
runs aiokafka code unchanged (docs/asyncio.md lists what differs). Each client owns one
worker thread that owns the synchronous kclient client: the event loop never waits for the
network, decoding or group membership.
"""
from __future__ import annotations

from kclient.aio.consumer import AIOKafkaConsumer
from kclient.aio.listener import ConsumerRebalanceListener
from kclient.aio.producer import AIOKafkaProducer
from kclient.errors import ConsumerStoppedError, IllegalOperation
from kclient.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = ["AIOKafkaConsumer", "AIOKafkaProducer", "ConsumerRebalanceListener", "ConsumerStoppedError",
           "IllegalOperation", "ConsumerRecord", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp"]

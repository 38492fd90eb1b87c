"""The Spark driver's questions to the cluster: which partitions the options name, and offsets
(earliest, latest, by timestamp), over the consumer's network layer alone.

The planner needs nothing else of a consumer: no group, no fetching, no positions. Importing
``KafkaConsumer`` (group coordination, the fetcher, metrics) costs about 0.2 s of CPU, and
Spark runs a Python source's driver side in a new Python process for every streaming query,
so that cost was part of every query's start. ``ClusterLookups`` is the consumer's
``ConsumerNetworkClient`` with the consumer's settings (security, timeouts, retries, metadata
age: the ``kafka.*`` options mean what they mean for the executors' readers) and the
consumer's own offset lookups (``OffsetFetcher``), so its answers are those
``partitions_for_topic``, ``topics``, ``beginning_offsets``, ``end_offsets`` and
``offsets_for_times`` of a ``KafkaConsumer`` with the same settings give.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from kclient import errors as Errors
from kclient.config import ConsumerConfig
from kclient.consumer.offset_fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OffsetFetcher
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.structs import TopicPartition

__all__ = ["ClusterLookups"]

log = logging.getLogger(__name__)


class ClusterLookups:
    """Metadata and ListOffsets lookups with consumer settings (see the module doc). Not
    thread-safe; one per planner."""

    def __init__(self, params: Mapping[str, Any]):
        config = ConsumerConfig(dict(params))
        self.config = config
        self.request_timeout_ms: int = config["request.timeout.ms"]
        self._client = ConsumerNetworkClient(config=NetworkClientConfig.of(config),
                                             max_response_bytes=config["receive.message.max.bytes"])
        self._metadata = self._client.metadata
        # The offset lookups read no subscription state: they only send ListOffsets to the
        # partitions' leaders, retrying after metadata refreshes.
        self._offsets = OffsetFetcher(self._client, None, isolation_level=config["isolation.level"],
                                      request_timeout_ms=self.request_timeout_ms,
                                      retry_backoff_ms=config["retry.backoff.ms"])

    @property
    def read_committed(self) -> bool:
        return str(self.config["isolation.level"]) == "read_committed"

    # -- metadata
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The topic's partition ids (None if it does not exist), from the metadata this client
        has, asking the cluster for a topic it has not looked up yet."""
        return self._client.topic_partitions(topic, self.request_timeout_ms)

    def topics(self) -> set[str]:
        """Every topic the cluster shows this client."""
        self._metadata.set_need_all_topics(True)
        try:
            if not self._client.await_metadata_update(self.request_timeout_ms):
                raise Errors.KafkaTimeoutError("no metadata for the topic list in time")
            return set(self._metadata.cluster.topics())
        finally:
            self._metadata.set_need_all_topics(False)

    def refresh(self) -> None:
        """A metadata update for the topics looked up so far, sent at once: Spark calls a
        stream reader's methods in quick succession, and a refresh must not wait out
        retry.backoff.ms after the previous one before it is even sent."""
        if not self._client.await_metadata_update(self.request_timeout_ms, immediate=True):
            raise Errors.KafkaTimeoutError("no metadata update for the subscribed topics in time")

    @property
    def metadata_version(self) -> int:
        """Counts the metadata answers this client received."""
        return self._metadata.update_version

    # -- offsets
    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._first_offsets(tps, EARLIEST_TIMESTAMP)

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offsets: the high watermark (read_uncommitted) or the last stable offset
        (read_committed)."""
        return self._first_offsets(tps, LATEST_TIMESTAMP)

    def offsets_for_times(self, query: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is at or after the given one (None: no such record)."""
        found = self._offsets.fetch_offsets_by_times(dict(query), self.request_timeout_ms)
        return {tp: (None if v is None else v[0]) for tp, v in found.items()}

    def _first_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        found = self._offsets.fetch_offsets_by_times({tp: timestamp for tp in tps}, self.request_timeout_ms)
        return {tp: (v[0] if v is not None else -1) for tp, v in found.items()}

    # -- lifecycle
    def close(self) -> None:
        self._client.close()

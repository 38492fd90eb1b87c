"""A KafkaConsumer with no broker behind it, for unit tests of the fetch path: the test puts
answers into its FetchBuffer as FetchRequests would, and nothing is ever sent."""
from __future__ import annotations

from kclient.clock import FakeClock
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.structs import TopicPartition


def offline_consumer(topic: str, partitions: int, **configs) -> tuple[KafkaConsumer, list[TopicPartition]]:
    """A consumer assigned ``partitions`` partitions of ``topic``, each at offset 0, whose
    fetcher sends nothing and whose network client polls nothing; close it with ``close(autocommit=False)``."""
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), enable_auto_commit=False,
                             clock=FakeClock(), **configs)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    consumer._fetcher.send_fetches = lambda: 0
    consumer._client.poll = lambda *a, **k: None
    return consumer, tps


def fetch_buffer_of(consumer: KafkaConsumer):
    """The consumer's FetchBuffer with its assignment taken in (as the first send_fetches
    would), for tests that put answers into it."""
    buffer = consumer._fetcher.buffer
    buffer.check_assignment()
    return buffer

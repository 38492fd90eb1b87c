"""confluent-kafka tuned for throughput: short fetch wait, large fetches and queues.

librdkafka's defaults favour latency over bulk reads: fetch.wait.max.ms=500 (a fetch for a
partition with no new data waits that long) and 1 MiB per partition per fetch. Here the
broker answers within 10 ms, each partition may bring 10 MiB, and the prefetch queue may
hold up to 1 GiB.
"""
from __future__ import annotations

from bench.drivers import confluent_default

LABEL = "confluent-kafka (tuned)"
GROUP_MODE = True
SETTINGS = {
    "fetch.wait.max.ms": 10,
    "fetch.min.bytes": 1,
    "max.partition.fetch.bytes": 10 * 1024 * 1024,
    "fetch.max.bytes": 50 * 1024 * 1024,
    "receive.message.max.bytes": 50 * 1024 * 1024 + 512 * 1024,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 1024 * 1024,
}
version = confluent_default.version
prepare = confluent_default.prepare


def consume(job, tally) -> dict:
    return confluent_default.run(job, tally, dict(SETTINGS))

"""kclient the way the Quickstart reads: ``for record in consumer`` with kclient's defaults
(no setting changed), counting each record and its value's length as the poll() drivers do."""
from __future__ import annotations

from bench.drivers import kclient_records

LABEL = "kclient (for record in consumer, defaults)"
GROUP_MODE = True
version, prepare = kclient_records.version, kclient_records.prepare
#: Records counted between two calls of the tally (whose call per record would be the
#: driver's cost, not the client's); the last chunk is cut at the target. zip() with a range
#: takes no record past the chunk from the consumer, so none is lost between chunks.
CHUNK = 4096


def consume(job, tally) -> dict:
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    settings = {"consumer_timeout_ms": 500, **job.extra.get("kclient", {})}
    if job.mode == "group":
        settings["session_timeout_ms"] = job.session_timeout_ms
    add, check, timed_out = tally.add, tally.check, tally.timed_out
    tally.start()
    consumer = KafkaConsumer(bootstrap_servers=job.bootstrap, group_id=job.group_id, enable_auto_commit=False,
                             auto_offset_reset="earliest", **settings)
    try:
        if job.mode == "assign":
            tps = [TopicPartition(job.topic, p) for p in range(job.partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([job.topic])
        left = tally.target
        it = iter(consumer)
        while left > 0 and not timed_out():
            # zip() over a range counts the records in C, so the loop's own Python work per
            # record is what the poll() drivers do (add the value's length): the difference
            # measured is the iteration's, not the driver's.
            n, nbytes, r = -1, 0, None
            for n, r in zip(range(min(CHUNK, left)), it):  # noqa: B007 (n: the count, read after)
                nbytes += len(r.value)
            n += 1
            if n:
                check(r.partition, r.offset, r.value)
                left -= n
                if add(n, nbytes):
                    break
    finally:
        consumer.close(autocommit=False)
    return {"consumer_timeout_ms": settings["consumer_timeout_ms"]}

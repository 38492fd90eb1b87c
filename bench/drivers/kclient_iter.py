"""kclient the way the Quickstart reads: ``for record in consumer`` with kclient's defaults
(no setting changed), counting each record and its value's length as the poll() drivers do."""
from __future__ import annotations

from bench.drivers import kclient_records

LABEL = "kclient (for record in consumer, defaults)"
GROUP_MODE = True
version, prepare = kclient_records.version, kclient_records.prepare
#: Records counted between two calls of the tally (whose call per record would be the
#: driver's cost, not the client's); the last chunk is cut at the target.
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
        n = nbytes = 0
        chunk = min(CHUNK, left)
        done = False
        while not done and not timed_out():
            for r in consumer:
                n += 1
                nbytes += len(r.value)
                if n == chunk:
                    check(r.partition, r.offset, r.value)
                    done = add(n, nbytes)
                    left -= n
                    n = nbytes = 0
                    chunk = min(CHUNK, left) or CHUNK
                    if done:
                        break
        if n:
            add(n, nbytes)
    finally:
        consumer.close(autocommit=False)
    return {"consumer_timeout_ms": settings["consumer_timeout_ms"]}

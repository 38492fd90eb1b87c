"""kclient the way the Quickstart reads: ``for record in consumer`` with kclient's defaults
(no setting changed), counting each record and its value's length as the poll() drivers do.
The kclient-iter-zero-copy driver runs the same loop with ``zero_copy_records=True``."""
from __future__ import annotations

from itertools import islice

from bench.drivers import kclient_records

LABEL = "kclient (for record in consumer, defaults)"
GROUP_MODE = True
version, prepare = kclient_records.version, kclient_records.prepare
#: Records counted between two calls of the tally (whose call per record would be the
#: driver's cost, not the client's); the last chunk is cut at the target. islice() takes no
#: record past the chunk from the consumer, so none is lost between chunks.
CHUNK = 4096


def consume(job, tally, base: dict | None = None) -> dict:
    from bench.drivers._common import fetch_figures
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    settings = {"consumer_timeout_ms": 500, **(base or {}), **job.extra.get("kclient", {})}
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
        size = job.record_size
        while left > 0 and not timed_out():
            # The loop's own Python work per record is what the poll() drivers do (add the
            # value's length), so the difference measured is the iteration's, not the
            # driver's. Every value of a benchmark topic is record_size bytes long, so the
            # bytes counted give the records counted (a count of anything else makes the run
            # invalid) without a counter per record; islice stops early only when the
            # consumer's iteration ends (consumer_timeout_ms without a record).
            nbytes, r = 0, None
            for r in islice(it, min(CHUNK, left)):
                nbytes += len(r.value)
            n = nbytes // size
            if r is not None:
                check(r.partition, r.offset, r.value)
                left -= n
                if add(n, nbytes):
                    break
        figures = fetch_figures(consumer)
    finally:
        consumer.close(autocommit=False)
    return {"consumer_timeout_ms": settings["consumer_timeout_ms"], **(base or {}), **figures}


class ZeroCopy:
    """The same loop with keys and values as memoryviews into the fetched answers (the
    ``zero.copy.records`` setting): no copy per record, which is most of the per-record cost
    with 1 KB and 10 KB values."""

    LABEL = "kclient (for record in consumer, zero.copy.records)"
    GROUP_MODE = True
    version, prepare = staticmethod(version), staticmethod(prepare)

    def consume(self, job, tally) -> dict:
        return consume(job, tally, base={"zero_copy_records": True})


ZERO_COPY = ZeroCopy()

"""confluent-kafka's asyncio consumer (``confluent_kafka.aio.AIOConsumer``), batched: ``await
consume(num_messages, timeout)`` in an asyncio loop, with the tuned fetch settings of
confluent-tuned (bench/drivers/confluent_tuned.py). Every record is checked for an error and
its value's length counted, as in the other per-record drivers; reports the largest delay of a
1 ms sleeper on the same loop (bench/drivers/_loop_lag.py)."""
from __future__ import annotations

from bench.drivers import confluent_default, confluent_tuned

LABEL = "confluent-kafka AIOConsumer (tuned)"
GROUP_MODE = True
CONSUME_BATCH = confluent_default.CONSUME_BATCH
version = confluent_default.version


def check() -> None:
    """Runner-side: this confluent-kafka has the asyncio consumer (2.12 and later)."""
    import importlib.util
    if importlib.util.find_spec("confluent_kafka") is None:
        raise ModuleNotFoundError("confluent-kafka is not installed: pip install -e '.[bench]'")
    from confluent_kafka import aio  # noqa: F401  (ImportError names what is missing)


def prepare() -> None:
    import asyncio  # noqa: F401

    import confluent_kafka.aio  # noqa: F401


def consume(job, tally) -> dict:
    import asyncio
    return asyncio.run(_consume(job, tally))


async def _consume(job, tally) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
    from confluent_kafka.aio import AIOConsumer

    from bench.drivers._loop_lag import LoopLag

    conf = {"bootstrap.servers": job.bootstrap, "group.id": job.group_id or f"bench-assign-{job.topic}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **confluent_tuned.SETTINGS,
            **job.extra.get("confluent", {})}
    if job.mode == "group":
        conf["session.timeout.ms"] = job.session_timeout_ms
    add, check, timed_out = tally.add, tally.check, tally.timed_out
    lag = LoopLag()
    lag.start()
    tally.start()
    consumer = AIOConsumer(conf)
    try:
        if job.mode == "assign":
            await consumer.assign([TopicPartition(job.topic, p, OFFSET_BEGINNING) for p in range(job.partitions)])
        else:
            await consumer.subscribe([job.topic])
        while True:
            msgs = await consumer.consume(num_messages=CONSUME_BATCH, timeout=0.5)
            if not msgs:
                if timed_out():
                    break
                continue
            nbytes = 0
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
                nbytes += len(m.value())
            last = msgs[-1]
            check(last.partition(), last.offset(), last.value())
            if add(len(msgs), nbytes):
                break
    finally:
        await lag.stop(tally)
        await consumer.close()
    return {"consume_batch": CONSUME_BATCH,
            **{k: v for k, v in conf.items() if k in confluent_tuned.SETTINGS or k == "session.timeout.ms"}}

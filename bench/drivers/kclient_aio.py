"""kclient.aio: ``AIOKafkaConsumer.getmany()`` in an asyncio loop (aiokafka's API, kclient's
core), with the fetch settings the tuned peers get (bench/drivers/_common.py); the
``kclient-aio-columnar`` driver reads with ``getmany_columnar()`` instead. Both report the
largest delay of a 1 ms sleeper on the same loop (bench/drivers/_loop_lag.py)."""
from __future__ import annotations

import types

from bench.drivers._common import PEER_FETCH_SETTINGS

LABEL = "kclient.aio (getmany)"
GROUP_MODE = True
#: aiokafka's keyword spelling of the tuned peers' fetch settings.
SETTINGS: dict = {k.replace(".", "_"): v for k, v in PEER_FETCH_SETTINGS.items()}


def version() -> str:
    import kclient
    return kclient.__version__


def prepare() -> None:
    """Import everything the consumer loads (before the measurement window)."""
    import asyncio  # noqa: F401

    import numpy  # noqa: F401
    import kclient.aio, kclient.consumer.columnar, kclient.consumer.kafka_consumer, kclient.group.consumer_coordinator  # noqa: F401,E401
    import kcore.records  # noqa: F401


def consume(job, tally, columnar: bool = False) -> dict:
    import asyncio
    return asyncio.run(_consume(job, tally, columnar))


async def _consume(job, tally, columnar: bool) -> dict:
    import numpy as np

    from bench.drivers._common import InvalidRun
    from bench.drivers._loop_lag import LoopLag
    from kclient.aio import AIOKafkaConsumer, TopicPartition

    add, check, timed_out = tally.add, tally.check, tally.timed_out
    frombuffer, int32 = np.frombuffer, np.int32
    settings = {**SETTINGS, **job.extra.get("kclient", {})}
    if job.mode == "group":
        settings["session_timeout_ms"] = job.session_timeout_ms
    lag = LoopLag()
    lag.start()
    next_offset: dict[int, int] = {}
    last_polled: dict = {}
    tally.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=job.bootstrap, group_id=job.group_id,
                                enable_auto_commit=False, auto_offset_reset="earliest", **settings)
    await consumer.start()
    try:
        if job.mode == "assign":
            tps = [TopicPartition(job.topic, p) for p in range(job.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([job.topic])
        while True:
            if columnar:
                polled = await consumer.getmany_columnar(timeout_ms=500)
            else:
                polled = await consumer.getmany(timeout_ms=500)
            if not polled:
                if timed_out():
                    break
                continue
            n = nbytes = 0
            for tp, recs in polled.items():
                if columnar:
                    rows = len(recs)
                    first = recs.first_offset
                    want = next_offset.get(tp.partition, first if job.mode == "group" else 0)
                    if first != want or recs.last_offset != first + rows - 1:
                        raise InvalidRun(f"partition {tp.partition}: offsets {first}..{recs.last_offset} "
                                         f"for {rows} rows, expected to start at {want}")
                    next_offset[tp.partition] = first + rows
                    n += rows
                    nbytes += int(frombuffer(recs.value_lengths, dtype=int32).sum())
                else:
                    for r in recs:
                        nbytes += len(r.value)
                    n += len(recs)
                    last = recs[-1]
                    check(tp.partition, last.offset, last.value)
            if columnar:
                last_polled = polled
            if add(n, nbytes):
                break
    finally:
        await lag.stop(tally)
        await consumer.stop()
    if columnar and last_polled:
        from bench.drivers.kclient_columnar import _check_last
        tally.after_window.append(lambda: _check_last(tally, last_polled))
    return settings


COLUMNAR = types.SimpleNamespace(
    LABEL="kclient.aio (getmany_columnar)", GROUP_MODE=True, version=version, prepare=prepare,
    consume=lambda job, tally: consume(job, tally, columnar=True))

"""kclient columnar: ``KafkaConsumer.poll_columnar()``, no Python object per record, with the
fetch settings the tuned peers get (bench/drivers/_common.py, PEER_FETCH_SETTINGS); the driver
kclient-columnar-defaults (kclient_defaults.py) runs it with kclient's defaults.

Per poll and partition the driver counts the rows, sums the int32 value lengths with numpy
(a vectorised read of the array, no per-record work) and checks that offsets continue
exactly where the previous poll ended (no gap, no duplicate). The last poll's final record
of each partition is also checked for its sequence number through ``to_arrow()``, after the
measurement window (pyarrow is imported only then).
"""
from __future__ import annotations

import os

from bench.drivers._common import PEER_FETCH_SETTINGS

LABEL = "kclient (columnar)"
#: Settings before the job's own (--kclient-setting).
SETTINGS: dict = dict(PEER_FETCH_SETTINGS)
GROUP_MODE = True
MAX_RECORDS = 1_000_000


def version() -> str:
    import kclient
    return kclient.__version__


def prepare() -> None:
    """Import everything the consumer loads (before the measurement window). numpy gets one
    thread: the driver only sums arrays, and OpenBLAS's pool of threads, started at import,
    spins for about 0.1 s of CPU, the last part of it inside the measurement window."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy  # noqa: F401
    import kclient.consumer.columnar, kclient.consumer.kafka_consumer, kclient.group.consumer_coordinator, kclient.consumer.fetcher  # noqa: F401,E401
    import kclient.protocol  # noqa: F401
    import kcore.records  # noqa: F401


def consume(job, tally, base: dict | None = None) -> dict:
    import numpy as np

    from bench.drivers._common import InvalidRun, fetch_figures
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition

    add, timed_out = tally.add, tally.timed_out
    frombuffer, int32 = np.frombuffer, np.int32
    next_offset: dict[int, int] = {}
    settings = {**(SETTINGS if base is None else base), **job.extra.get("kclient", {})}
    if job.mode == "group":
        settings["session_timeout_ms"] = job.session_timeout_ms
    tally.start()
    consumer = KafkaConsumer(bootstrap_servers=job.bootstrap, group_id=job.group_id,
                             enable_auto_commit=False, auto_offset_reset="earliest", **settings)
    try:
        if job.mode == "assign":
            tps = [TopicPartition(job.topic, p) for p in range(job.partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([job.topic])
        while True:
            polled = consumer.poll_columnar(timeout_ms=500, max_records=MAX_RECORDS)
            if not polled:
                if timed_out():
                    break
                continue
            n = nbytes = 0
            for tp, cols in polled.items():
                rows = len(cols)
                if rows == 0:
                    continue
                first = cols.first_offset
                want = next_offset.get(tp.partition, first if job.mode == "group" else 0)
                if first != want or cols.last_offset != first + rows - 1:
                    raise InvalidRun(f"partition {tp.partition}: offsets {first}..{cols.last_offset} "
                                     f"for {rows} rows, expected to start at {want}")
                next_offset[tp.partition] = first + rows
                n += rows
                nbytes += int(frombuffer(cols.value_lengths, dtype=int32).sum())
            if add(n, nbytes):
                tally.after_window.append(lambda polled=polled: _check_last(tally, polled))
                break
        figures = fetch_figures(consumer)
    finally:
        consumer.close(autocommit=False)
    return {"max_records": MAX_RECORDS, **settings, **figures}


def _check_last(tally, polled) -> None:
    for tp, cols in polled.items():
        if len(cols):
            values = cols.to_arrow().column("value")
            tally.check(tp.partition, cols.last_offset, values[len(cols) - 1].as_py())

"""aiokafka with its default settings, ``getmany()`` in an asyncio loop; reports the largest
delay of a 1 ms sleeper on the same loop (bench/drivers/_loop_lag.py)."""
from __future__ import annotations

LABEL = "aiokafka"
GROUP_MODE = True


def version() -> str:
    import aiokafka
    return aiokafka.__version__


def check() -> None:
    """Runner-side: the library is installed (else this peer is skipped, with the reason)."""
    import importlib.util
    if importlib.util.find_spec("aiokafka") is None:
        raise ModuleNotFoundError("aiokafka is not installed: pip install -e '.[bench]'")


def prepare() -> None:
    import asyncio  # noqa: F401

    import aiokafka  # noqa: F401


def consume(job, tally) -> dict:
    import asyncio
    return asyncio.run(_consume(job, tally))


async def _consume(job, tally) -> dict:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from bench.drivers._loop_lag import LoopLag

    add, check, timed_out = tally.add, tally.check, tally.timed_out
    settings = {"session_timeout_ms": job.session_timeout_ms} if job.mode == "group" else {}
    lag = LoopLag()
    lag.start()
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
            polled = await consumer.getmany(timeout_ms=500)
            if not polled:
                if timed_out():
                    break
                continue
            n = nbytes = 0
            for tp, recs in polled.items():
                for r in recs:
                    nbytes += len(r.value)
                n += len(recs)
                last = recs[-1]
                check(tp.partition, last.offset, last.value)
            if add(n, nbytes):
                break
    finally:
        await lag.stop(tally)
        await consumer.stop()
    return settings


# ---------------------------------------------------------------------------- liveness
class Member:
    """A group member for the liveness benchmark, driven synchronously: each ``poll`` runs
    the event loop for one ``getmany``; between polls the loop (and so aiokafka's heartbeat
    task) does not run, as in an asyncio application that blocks the loop while it works."""

    def __init__(self, bootstrap, topic, group_id, session_timeout_ms, heartbeat_interval_ms, event) -> None:
        import asyncio

        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                event("revoked", sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned):
                event("assigned", sorted(tp.partition for tp in assigned))

        self.loop = asyncio.new_event_loop()

        async def start():
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, group_id=group_id, session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms, enable_auto_commit=False,
                auto_offset_reset="earliest")
            await consumer.start()
            consumer.subscribe([topic], listener=Listener())
            return consumer

        self.consumer = self.loop.run_until_complete(start())

    def poll(self, timeout_s: float) -> int:
        polled = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=int(timeout_s * 1000)))
        return sum(len(v) for v in polled.values())

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()


member = Member

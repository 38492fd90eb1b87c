"""kafka-python with its default settings (``poll()`` returns up to 500 records)."""
from __future__ import annotations

LABEL = "kafka-python"
GROUP_MODE = True


def version() -> str:
    import kafka
    return kafka.__version__


def check() -> None:
    """Runner-side: the library is installed (else this peer is skipped, with the reason)."""
    import importlib.util
    if importlib.util.find_spec("kafka") is None:
        raise ModuleNotFoundError("kafka-python is not installed: pip install -e '.[bench]'")


def prepare() -> None:
    import kafka  # noqa: F401


def consume(job, tally) -> dict:
    from kafka import KafkaConsumer, TopicPartition
    return poll_loop(KafkaConsumer, TopicPartition, job, tally, {})


def poll_loop(consumer_class, tp_class, job, tally, settings: dict) -> dict:
    """The per-record loop shared with kclient (same API): count every record and its
    value's length, spot-check the last record of each partition's batch."""
    add, check, timed_out = tally.add, tally.check, tally.timed_out
    if job.mode == "group":
        settings = dict(settings, session_timeout_ms=job.session_timeout_ms)
    tally.start()
    consumer = consumer_class(bootstrap_servers=job.bootstrap, group_id=job.group_id,
                              enable_auto_commit=False, auto_offset_reset="earliest", **settings)
    try:
        if job.mode == "assign":
            tps = [tp_class(job.topic, p) for p in range(job.partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([job.topic])
        while True:
            polled = consumer.poll(timeout_ms=500)
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
        consumer.close(autocommit=False)
    return settings


# ---------------------------------------------------------------------------- liveness
class PollMember:
    """A group member with kafka-python's API (also used for kclient): subscribe with a
    rebalance listener that reports every callback through ``event(kind, partitions)``."""

    def __init__(self, consumer_class, listener_base, bootstrap: str, topic: str, group_id: str,
                 session_timeout_ms: int, heartbeat_interval_ms: int, event, **settings) -> None:
        class Listener(listener_base):
            def on_partitions_revoked(self, revoked):
                event("revoked", sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned):
                event("assigned", sorted(tp.partition for tp in assigned))

            def on_partitions_lost(self, lost):
                event("lost", sorted(tp.partition for tp in lost))

        # None: the broker sets the timing (group.protocol=consumer), the client must not.
        timing = {k: v for k, v in (("session_timeout_ms", session_timeout_ms),
                                    ("heartbeat_interval_ms", heartbeat_interval_ms)) if v is not None}
        self.consumer = consumer_class(
            bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
            auto_offset_reset="earliest", **timing, **settings)
        self.consumer.subscribe([topic], listener=Listener())

    def poll(self, timeout_s: float) -> int:
        polled = self.consumer.poll(timeout_ms=int(timeout_s * 1000))
        return sum(len(v) for v in polled.values())

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        self.consumer.close(autocommit=False)


# The liveness benchmark runs on librdkafka's mock cluster, whose answer to ApiVersions v3
# kafka-python 3.0.12 cannot parse (it gives up bootstrapping); api_version=(2, 3) makes it
# ask with an older version the mock answers normally (it then uses JoinGroup v5, Heartbeat v3).
LIVENESS_SETTINGS = {"api_version": (2, 3)}


def member(bootstrap, topic, group_id, session_timeout_ms, heartbeat_interval_ms, event) -> PollMember:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    return PollMember(KafkaConsumer, ConsumerRebalanceListener, bootstrap, topic, group_id,
                      session_timeout_ms, heartbeat_interval_ms, event, **LIVENESS_SETTINGS)

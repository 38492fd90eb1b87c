"""confluent-kafka (librdkafka) with its default settings, via the batch ``consume()`` API.

``consume(num_messages=10000)`` is the fastest way to read with confluent-kafka from Python
(one call per batch, not per record); every record is checked for an error and its value's
length is counted, as in the other per-record drivers.
"""
from __future__ import annotations

LABEL = "confluent-kafka (defaults)"
GROUP_MODE = True
CONSUME_BATCH = 10_000
SETTINGS: dict = {}


def version() -> str:
    import confluent_kafka
    return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"


def prepare() -> None:
    import confluent_kafka  # noqa: F401


def run(job, tally, overrides: dict) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": job.bootstrap, "group.id": job.group_id or f"bench-assign-{job.topic}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **overrides,
            **job.extra.get("confluent", {})}
    if job.mode == "group":
        conf["session.timeout.ms"] = job.session_timeout_ms
    add, check, timed_out = tally.add, tally.check, tally.timed_out
    tally.start()
    consumer = Consumer(conf)
    try:
        if job.mode == "assign":
            consumer.assign([TopicPartition(job.topic, p, OFFSET_BEGINNING) for p in range(job.partitions)])
        else:
            consumer.subscribe([job.topic])
        while True:
            msgs = consumer.consume(num_messages=CONSUME_BATCH, timeout=0.5)
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
        consumer.close()
    return {"consume_batch": CONSUME_BATCH, **{k: v for k, v in conf.items() if k in overrides or k == "session.timeout.ms"}}


def consume(job, tally) -> dict:
    return run(job, tally, dict(SETTINGS))


# ---------------------------------------------------------------------------- liveness
class Member:
    """A group member for the liveness benchmark: callbacks reported through ``event``."""

    def __init__(self, bootstrap, topic, group_id, session_timeout_ms, heartbeat_interval_ms, event,
                 settings=None) -> None:
        from confluent_kafka import Consumer
        self._assignment: list[int] = []

        def on_assign(consumer, partitions):
            self._assignment = sorted(p.partition for p in partitions)
            event("assigned", self._assignment)

        def on_revoke(consumer, partitions):
            event("revoked", sorted(p.partition for p in partitions))
            self._assignment = []

        def on_lost(consumer, partitions):
            event("lost", sorted(p.partition for p in partitions))
            self._assignment = []

        # None: the broker sets the timing (group.protocol=consumer), the client must not.
        timing = {k: v for k, v in (("session.timeout.ms", session_timeout_ms),
                                    ("heartbeat.interval.ms", heartbeat_interval_ms)) if v is not None}
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group_id, **timing, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", **(settings or {})})
        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def poll(self, timeout_s: float) -> int:
        msgs = self.consumer.consume(num_messages=10_000, timeout=timeout_s)
        return sum(1 for m in msgs if m.error() is None)

    def assignment(self) -> list[int]:
        return sorted(p.partition for p in self.consumer.assignment())

    def close(self) -> None:
        self.consumer.close()


member = Member

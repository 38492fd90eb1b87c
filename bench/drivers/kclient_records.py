"""kclient per record: ``KafkaConsumer.poll()`` with kafka-python's API, with the fetch settings
and poll size the tuned peers get (bench/drivers/_common.py, PEER_FETCH_SETTINGS); the driver
kclient-records-defaults (kclient_defaults.py) runs it with kclient's defaults."""
from __future__ import annotations

from bench.drivers._common import PEER_FETCH_SETTINGS, PEER_MAX_POLL_RECORDS
from bench.drivers.kafka_python import poll_loop

LABEL = "kclient (per record)"
#: Settings before the job's own (--kclient-setting).
SETTINGS: dict = {**PEER_FETCH_SETTINGS, "max.poll.records": PEER_MAX_POLL_RECORDS}
GROUP_MODE = True


def version() -> str:
    import kclient
    return kclient.__version__


def prepare() -> None:
    """Import everything the consumer loads (before the measurement window)."""
    import kclient.consumer.columnar, kclient.consumer.kafka_consumer, kclient.group.consumer_coordinator, kclient.consumer.fetcher  # noqa: F401,E401
    import kclient.protocol  # noqa: F401
    import kcore.records  # noqa: F401


def consume(job, tally, base: dict | None = None) -> dict:
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    return poll_loop(KafkaConsumer, TopicPartition, job, tally, {**(SETTINGS if base is None else base),
                                                                   **job.extra.get("kclient", {})})


def member(bootstrap, topic, group_id, session_timeout_ms, heartbeat_interval_ms, event, settings=None):
    """A group member for the liveness benchmark (bench/liveness.py); ``settings``: more
    consumer settings (security, group protocol)."""
    from bench.drivers.kafka_python import PollMember
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.subscription.listener import ConsumerRebalanceListener
    return PollMember(KafkaConsumer, ConsumerRebalanceListener, bootstrap, topic, group_id,
                      session_timeout_ms, heartbeat_interval_ms, event, **(settings or {}))

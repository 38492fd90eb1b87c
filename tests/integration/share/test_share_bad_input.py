"""Misuse of a share consumer gives a clear error, against Apache Kafka 4.4."""
from __future__ import annotations

import pytest

from kclient import errors as Errors
from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer

from test_share_consumer import collect, produce, ready  # noqa: E402


def test_a_record_of_another_consumer_is_refused(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit") as a, \
            KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=f"{group_id}-other",
                               share_acknowledgement_mode="explicit") as b:
        for c in (a, b):
            ready(c)
        produce(kafka.bootstrap, topic_name, [b"mine"])
        # each group gets the record: b's copy is not one a's last poll returned
        [theirs] = collect(b, 1)
        [mine] = collect(a, 1)
        assert theirs.offset == mine.offset
        b.acknowledge(theirs, type=AcknowledgeType.ACCEPT)
        a.acknowledge(mine, type=AcknowledgeType.ACCEPT)
        with pytest.raises(Errors.IllegalStateError, match="already acknowledged"):
            a.acknowledge(theirs)
        assert not a.poll(500)
        with pytest.raises(Errors.IllegalStateError, match="not returned"):
            a.acknowledge(theirs)               # a's last poll returned nothing


def test_everything_after_close_is_refused(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    c = KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                           share_acknowledgement_mode="explicit")
    c.close(5000)
    c.close()                                       # idempotent
    for call in (lambda: c.poll(0), lambda: c.poll_columnar(0), lambda: c.commit_sync(0), c.commit_async,
                 lambda: c.acknowledge(topic_name, 0, 0), lambda: c.acknowledge_range(topic_name, 0, 0, 1),
                 lambda: c.subscribe([topic_name]), c.unsubscribe):
        with pytest.raises(Errors.IllegalStateError, match="closed"):
            call()

"""KafkaShareConsumer against the 3-node Apache Kafka behind fault proxies: acknowledgements
whose request gets no answer."""
from __future__ import annotations

import pytest

from kclient import errors as Errors
from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer
from kclient.structs import TopicPartition

from test_share_consumer import collect, produce, ready, wait_for


def test_commit_sync_names_a_partition_whose_acknowledgements_got_no_answer(kafka3, create_topic, topic_name,
                                                                           group_id):
    """The leader's link goes dead after the acknowledgements left: commit_sync returns at its
    timeout with a KafkaTimeoutError for that partition (the outcome is unknown: the broker may
    have taken them), not without it; the answer that comes once the link is back goes to the
    commit callback."""
    if not kafka3.proxies:
        pytest.skip("the kafka3 cluster has no client proxies")
    create_topic(kafka3, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    proxy = kafka3.proxies[kafka3.leader_of(topic_name, 0)]
    answers = []
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka3.proxied_bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit", request_timeout_ms=20000) as c:
        c.set_acknowledgement_commit_callback(lambda offsets, exc: answers.append((set(offsets[tp]), exc)))
        ready(c)
        produce(kafka3.bootstrap, topic_name, [b"a", b"b", b"c"])
        got = collect(c, 3, ack=lambda r: AcknowledgeType.ACCEPT)
        assert len(got) == 3
        proxy.blackhole()
        try:
            result = c.commit_sync(1000)
        finally:
            proxy.heal()
        assert list(result) == [tp] and isinstance(result[tp], Errors.KafkaTimeoutError), result
        assert "no answer" in str(result[tp])
        assert wait_for(lambda: answers, 15, step=lambda: c.poll(100)), "no answer after the link came back"
        assert answers == [({r.offset for r in got}, None)]

"""KafkaShareConsumer's settings: its own two, the consumer's it shares, the errors."""
from __future__ import annotations

import pytest

from kclient.config import ConsumerConfig
from kclient.errors import ConfigurationError
from kclient.share.fetcher import BATCH_OPTIMIZED, RECORD_LIMIT
from kclient.share.share_config import ShareConsumerConfig, split_share_settings


def build(**settings):
    rest, own = split_share_settings(settings)
    return ShareConsumerConfig.of(ConsumerConfig(rest), own)


def test_defaults():
    c = build(bootstrap_servers="h:9092", group_id="g")
    assert not c.explicit_acknowledgement and c.fetch.acquire_mode == BATCH_OPTIMIZED
    assert c.max_poll_records == c.fetch.max_records == c.fetch.batch_size == 500
    assert c.fetch.max_wait_ms == 500 and c.group_id == "g" and c.client_rack is None


def test_java_and_kafka_python_spellings():
    dotted = split_share_settings({"share.acknowledgement.mode": "EXPLICIT", "share.acquire.mode": "record_limit",
                                   "group.id": "g"})
    keyword = split_share_settings({"share_acknowledgement_mode": "explicit", "share_acquire_mode": "Record_Limit",
                                    "group.id": "g"})
    assert dotted == keyword == ({"group.id": "g"}, {"share.acknowledgement.mode": "explicit",
                                                     "share.acquire.mode": "record_limit"})
    c = build(bootstrap_servers="h:9092", group_id="g", share_acquire_mode="record_limit", max_poll_records=7)
    assert c.fetch.acquire_mode == RECORD_LIMIT and c.fetch.max_records == 7


@pytest.mark.parametrize("settings,match", [
    ({"share_acknowledgement_mode": "sometimes"}, "share.acknowledgement.mode"),
    ({"share.acquire.mode": "greedy"}, "share.acquire.mode"),
    ({"share.acquire.mode": "record_limit", "share_acquire_mode": "record_limit"}, "given twice"),
])
def test_bad_share_settings(settings, match):
    with pytest.raises(ConfigurationError, match=match):
        build(bootstrap_servers="h:9092", group_id="g", **settings)


def test_group_id_is_required():
    with pytest.raises(ConfigurationError, match="group.id"):
        build(bootstrap_servers="h:9092")


def test_unknown_setting_fails_like_the_consumers():
    with pytest.raises(ConfigurationError):
        build(bootstrap_servers="h:9092", group_id="g", no_such_setting=1)

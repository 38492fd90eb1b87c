"""Settings (kclient.config): names, spellings, types and defaults of the consumer, producer
and admin client tables, checked at construction with errors that name the setting."""
from __future__ import annotations

import math

import pytest

from kclient import errors as Errors
from kclient.admin import ADMIN_CONFIGS
from kclient.config import (CONSUMER_CONFIGS, AdminClientConfig, ClientSettings, ConsumerConfig, IsolationLevel,
                            ProducerConfig, common_client_defs)
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.consumer.deserializers import JsonSerializer
from kclient.producer import PRODUCER_CONFIGS
from kclient.network.network_config import NetworkClientConfig


def producer_settings(**kwargs):
    return ProducerConfig(**kwargs)


def admin_settings(**kwargs):
    return AdminClientConfig(**kwargs)


def test_a_table_given_directly_checks_as_the_client_class_does():
    # ClientSettings (the former name of AbstractConfig) still takes a table and a name.
    direct = ClientSettings(PRODUCER_CONFIGS, "producer", None, {"linger_ms": 5})
    assert dict(direct) == dict(ProducerConfig(linger_ms=5))
    with pytest.raises(Errors.ConfigurationError, match="unknown producer setting 'group_id'"):
        ClientSettings(PRODUCER_CONFIGS, "producer", None, {"group_id": "g"})


@pytest.mark.parametrize("make, key, value, what", [
    (ProducerConfig, "group_id", "g", "producer"),
    (ProducerConfig, "fetch.max.bytes", 1, "producer"),
    (ProducerConfig, "enable_auto_commit", False, "producer"),
    (AdminClientConfig, "linger_ms", 5, "admin client"),
    (AdminClientConfig, "acks", "all", "admin client"),
])
def test_a_setting_of_another_client_fails_naming_it(make, key, value, what):
    with pytest.raises(Errors.ConfigurationError, match=f"unknown {what} setting '{key}'"):
        make({key: value})


def test_the_producer_checks_its_own_settings():
    p = ProducerConfig({"acks": "all", "compression.type": "ZSTD"}, linger_ms="5", batch_size=1000)
    assert (p["acks"], p["compression.type"], p.linger_ms, p["batch.size"]) == (-1, "zstd", 5, 1000)
    for key, value, match in [("acks", 2, "'acks' must be"), ("linger.ms", -1, "'linger.ms' must be at least 0"),
                              ("batch_size", "big", "'batch.size' must be an integer"),
                              ("compression_type", "brotli", "'compression.type' must be one of")]:
        with pytest.raises(Errors.ConfigurationError, match=match):
            ProducerConfig({key: value})


# ---------------------------------------------------------------------- unknown settings
@pytest.mark.parametrize("make, key, suggestion", [
    (lambda **kw: ConsumerConfig(**kw), "sesion_timeout_ms", "session_timeout_ms"),
    (lambda **kw: ConsumerConfig(kw), "fetch.max.byte", "fetch.max.bytes"),
    (producer_settings, "lingerms", "linger_ms"),
    (admin_settings, "request_timeout", "request_timeout_ms"),
])
def test_unknown_setting_is_named_with_a_suggestion(make, key, suggestion):
    with pytest.raises(Errors.ConfigurationError) as info:
        make(**{key: 1})
    message = str(info.value)
    assert "unknown" in message and repr(key) in message
    assert f"did you mean {suggestion!r}" in message


def test_unknown_setting_without_a_close_match_has_no_hint():
    with pytest.raises(Errors.ConfigurationError) as info:
        ConsumerConfig(zzzzzzzz=1)
    assert "'zzzzzzzz'" in str(info.value) and "did you mean" not in str(info.value)


def test_a_producer_setting_is_unknown_to_the_consumer_and_back():
    with pytest.raises(Errors.ConfigurationError, match="'linger_ms'"):
        ConsumerConfig(linger_ms=5)
    with pytest.raises(Errors.ConfigurationError, match="unknown producer setting 'group_id'"):
        producer_settings(group_id="g")


# ---------------------------------------------------------------------- types
@pytest.mark.parametrize("key, value, expected", [
    ("fetch_min_bytes", "lots", r"'fetch\.min\.bytes' must be an integer"),
    ("max_poll_records", True, r"'max\.poll\.records' must be an integer"),
    ("metadata_max_age_ms", 1.5, r"'metadata\.max\.age\.ms' must be an integer \(long\)"),
    ("request_timeout_ms", 2**40, r"'request\.timeout\.ms'.*Java int"),
    ("enable_auto_commit", "yes", r"'enable\.auto\.commit' must be a boolean"),
    ("client_id", 5, r"'client\.id' must be a string"),
    ("partition_assignment_strategy", 5, r"'partition\.assignment\.strategy' must be a list"),
    ("consumer_timeout_ms", "soon", r"'consumer\.timeout\.ms' must be a number"),
    ("consumer_timeout_ms", -1, r"'consumer\.timeout\.ms' must be at least 0"),
    ("max_poll_records", 0, r"'max\.poll\.records' must be at least 1"),
    ("receive_buffer_bytes", -2, r"'receive\.buffer\.bytes' must be at least -1"),
    ("auto_offset_reset", "middle", r"'auto\.offset\.reset' must be one of"),
    ("isolation_level", "dirty", r"'isolation\.level' must be 'read_uncommitted' or 'read_committed'"),
    ("value_deserializer", 5, r"'value\.deserializer' must be a callable or have a deserialize"),
    ("key_deserializer", "no.such.module.Thing", r"'key\.deserializer': cannot load"),
    ("default_offset_commit_callback", "f", r"'default\.offset\.commit\.callback' must be callable"),
    ("security_protocol", "TLS", r"'security\.protocol' must be one of"),
    ("proxy_url", "http://p:1", r"'proxy\.url': proxies are not supported"),
    ("bootstrap_servers", "h:notaport", r"'bootstrap\.servers': bad port"),
])
def test_ill_typed_setting_names_the_setting_and_the_expected_type(key, value, expected):
    with pytest.raises(Errors.ConfigurationError, match=expected):
        ConsumerConfig(**{key: value})


@pytest.mark.parametrize("key, value, expected", [
    ("acks", 2, r"'acks' must be 'all', -1, 0 or 1"),
    ("compression_type", "brotli", r"'compression\.type' must be one of"),
    ("linger_ms", "soon", r"'linger\.ms' must be an integer"),
    ("key_serializer", 5, r"'key\.serializer' must be a callable or have a serialize"),
    ("partitioner", 5, r"'partitioner' must be a callable or have a partition"),
    ("enable_idempotence", True, r"'enable\.idempotence': not supported"),
    ("transactional_id", "tx", r"'transactional\.id': transactions are not supported"),
    ("socks5_proxy", "socks5://p:1", r"'socks5\.proxy': proxies are not supported"),
])
def test_ill_typed_producer_setting_names_it(key, value, expected):
    with pytest.raises(Errors.ConfigurationError, match=expected):
        producer_settings(**{key: value})


def test_settings_must_be_a_mapping_of_strings():
    with pytest.raises(Errors.ConfigurationError, match="mapping"):
        ConsumerConfig([("client.id", "x")])
    with pytest.raises(Errors.ConfigurationError, match="strings"):
        ConsumerConfig({1: "x"})


def test_an_unsupported_sasl_mechanism_fails_at_construction_naming_it():
    assert ConsumerConfig(security_protocol="ssl")["security.protocol"] == "SSL"
    with pytest.raises(Errors.ConfigurationError, match=r"sasl\.mechanism GSSAPI"):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_SSL")


# ---------------------------------------------------------------------- spellings
def test_dotted_and_underscore_keys_are_the_same_setting():
    a = ConsumerConfig({"session.timeout.ms": 10000, "max.poll.records": 7})
    b = ConsumerConfig(session_timeout_ms=10000, max_poll_records=7)
    c = ConsumerConfig({"session.timeout.ms": 10000}, max_poll_records=7)
    assert dict(a) == dict(b) == dict(c)
    assert a["session_timeout_ms"] == a["session.timeout.ms"] == a.session_timeout_ms == 10000
    assert a.is_set("max_poll_records") and a.is_set("max.poll.records") and not a.is_set("fetch.min.bytes")
    p = producer_settings(**{"linger_ms": 3})
    assert p["linger.ms"] == p["linger_ms"] == 3


def test_the_same_setting_twice_must_agree():
    assert ConsumerConfig({"client.id": "a"}, client_id="a")["client.id"] == "a"
    with pytest.raises(Errors.ConfigurationError, match=r"'client\.id' given twice"):
        ConsumerConfig({"client.id": "a"}, client_id="b")


def test_values_are_converted_from_strings():
    cfg = ConsumerConfig({"fetch.min.bytes": "10", "enable.auto.commit": "false",
                          "partition.assignment.strategy": "roundrobin, range", "auto.offset.reset": "EARLIEST"})
    assert cfg["fetch.min.bytes"] == 10 and cfg["enable.auto.commit"] is False
    assert cfg["partition.assignment.strategy"] == ["roundrobin", "range"]
    assert cfg["auto.offset.reset"] == "earliest"


# ---------------------------------------------------------------------- kafka-python keywords
def test_kafka_python_keywords_and_values_are_accepted():
    cb = lambda offsets, exc: None  # noqa: E731
    cfg = ConsumerConfig(
        bootstrap_servers=["h1:9093", "h2"], api_version=(2, 0, 0), api_version_auto_timeout_ms=500,
        consumer_timeout_ms=1500, default_offset_commit_callback=cb, metric_group_prefix="app",
        isolation_level=IsolationLevel.READ_COMMITTED, key_deserializer=JsonSerializer(),
        value_deserializer=lambda b: b.decode(), send_buffer_bytes=None, receive_buffer_bytes=None,
        sasl_mechanism=None, ssl_cafile=None, ssl_check_hostname=False, legacy_iterator=True,
        enable_incremental_fetch_sessions=False, sock_chunk_bytes=8192, socks5_proxy=None)
    assert cfg.bootstrap_addresses == [("h1", 9093), ("h2", 9092)]
    assert cfg["isolation.level"] == "read_committed"
    assert cfg["consumer.timeout.ms"] == 1500 and cfg["default.offset.commit.callback"] is cb
    assert cfg["send.buffer.bytes"] == cfg["receive.buffer.bytes"] == -1      # None: the OS default
    assert cfg["sasl.mechanism"] == "GSSAPI"                                  # None: the default
    assert cfg["api.version"] == (2, 0, 0)
    assert ConsumerConfig(isolation_level=0)["isolation.level"] == "read_uncommitted"
    assert ConsumerConfig(consumer_timeout_ms=float("inf"))["consumer.timeout.ms"] == math.inf


def test_dotted_class_names_load_plugins():
    cfg = ConsumerConfig(value_deserializer="kclient.consumer.deserializers.JsonSerializer")
    assert isinstance(cfg["value.deserializer"], JsonSerializer)        # a class is instantiated
    p = producer_settings(key_serializer="kclient.consumer.deserializers.JsonSerializer")
    assert isinstance(p["key.serializer"], JsonSerializer)


def test_kafka_python_producer_values():
    p = producer_settings(retries=float("inf"), acks="all", compression_type=None, send_buffer_bytes=None)
    assert p["retries"] == 2**31 - 1 and p["acks"] == -1 and p["compression.type"] == "none"
    assert p["send.buffer.bytes"] == -1


# ---------------------------------------------------------------------- defaults
KAFKA_CONSUMER_DEFAULTS = {            # as documented for the Java consumer (Kafka 3.x / 4.x)
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "max.poll.interval.ms": 300000,
    "max.poll.records": 500,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 1048576,
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "request.timeout.ms": 30000,
    "default.api.timeout.ms": 60000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "metadata.max.age.ms": 300000,
    "connections.max.idle.ms": 540000,
    "send.buffer.bytes": 131072,
    "socket.connection.setup.timeout.ms": 10000,
    "socket.connection.setup.timeout.max.ms": 30000,
    "isolation.level": "read_uncommitted",
    "partition.assignment.strategy": ["range", "cooperative-sticky"],
    "allow.auto.create.topics": True,
    "exclude.internal.topics": True,
    "check.crcs": True,
    "group.id": None,
    "group.instance.id": None,
    "security.protocol": "PLAINTEXT",
}


@pytest.mark.parametrize("name, default", sorted(KAFKA_CONSUMER_DEFAULTS.items()))
def test_consumer_defaults_are_kafkas(name, default):
    assert ConsumerConfig()[name] == default
    assert CONSUMER_CONFIGS[name].default == default


def test_the_consumer_leaves_its_receive_buffer_to_the_os_as_kafka_python_and_librdkafka_do():
    # The one consumer default that is not the Java consumer's (65536): documented with why.
    assert ConsumerConfig()["receive.buffer.bytes"] == CONSUMER_CONFIGS["receive.buffer.bytes"].default == -1
    doc = CONSUMER_CONFIGS["receive.buffer.bytes"].doc
    assert "kafka-python" in doc and "librdkafka" in doc and "65536" in doc
    assert ConsumerConfig(receive_buffer_bytes=65536)["receive.buffer.bytes"] == 65536


def test_producer_and_admin_defaults_follow_their_java_clients():
    p, a = producer_settings(), admin_settings()
    assert p["receive.buffer.bytes"] == 32768 and a["receive.buffer.bytes"] == 65536
    assert (p["acks"], p["linger.ms"], p["batch.size"], p["max.request.size"]) == (1, 0, 16384, 1048576)
    assert (p["buffer.memory"], p["max.block.ms"], p["delivery.timeout.ms"]) == (33554432, 60000, 120000)
    assert a["default.api.timeout.ms"] == 60000 and a["allow.auto.create.topics"] is False


def test_defaults_are_fresh_copies():
    a = ConsumerConfig()
    a["partition.assignment.strategy"].append("roundrobin")
    assert ConsumerConfig()["partition.assignment.strategy"] == ["range", "cooperative-sticky"]


def test_none_means_the_default_but_not_for_nullable_settings():
    cfg = ConsumerConfig(fetch_min_bytes=None, client_id=None, group_id=None)
    assert cfg["fetch.min.bytes"] == 1 and cfg["client.id"] == "kclient" and cfg["group.id"] is None
    assert not cfg.is_set("fetch.min.bytes")


def test_a_maximum_below_its_base_is_raised_to_it():
    cfg = ConsumerConfig(retry_backoff_ms=2000, retry_backoff_max_ms=1000)
    assert cfg["retry.backoff.max.ms"] == 2000


# ---------------------------------------------------------------------- one table of shared settings
def test_every_client_takes_the_shared_settings_from_one_place():
    shared = {d.name: d for d in common_client_defs()}
    for table in (list(CONSUMER_CONFIGS.values()), PRODUCER_CONFIGS, ADMIN_CONFIGS):
        by_name = {d.name: d for d in table}
        for name, d in shared.items():
            assert name in by_name
            if name != "receive.buffer.bytes":          # the producer's Java default differs
                if name == "enable.metrics.push" and table is not PRODUCER_CONFIGS and table is not ADMIN_CONFIGS:
                    # The consumer pushes its metrics (KIP-714); the others only accept the setting.
                    assert (by_name[name].default, by_name[name].type, by_name[name].no_effect) == (d.default, d.type, "")
                    continue
                assert by_name[name] == d, name


def test_network_config_carries_the_shared_settings():
    p = producer_settings(bootstrap_servers="p:1", request_timeout_ms=1234, linger_ms=5)
    net = NetworkClientConfig.of(p)
    assert net.bootstrap_addresses == (("p", 1),) and net.request_timeout_ms == 1234
    assert net.receive_buffer_bytes == 32768


def test_repr_hides_secrets():
    cfg = ConsumerConfig(ssl_password="hunter2", client_id="me")
    assert "hunter2" not in repr(cfg) and "'me'" in repr(cfg)


def test_group_protocol_settings_of_the_other_protocol_are_refused():
    # As the Java client does: a setting the chosen protocol does not use is an error, not a no-op.
    from kclient.consumer.consumer_settings import ConsumerSettings
    s = ConsumerSettings.of(ConsumerConfig(group_id="g", group_protocol="CONSUMER", group_remote_assignor="range"))
    assert (s.coordinator.group_protocol, s.coordinator.remote_assignor) == ("consumer", "range")
    for name, value in (("partition.assignment.strategy", ["range"]), ("session.timeout.ms", 10000),
                        ("heartbeat.interval.ms", 1000)):
        with pytest.raises(Errors.ConfigurationError, match=f"{name}.*does not apply to group.protocol=consumer"):
            ConsumerSettings.of(ConsumerConfig({"group.protocol": "consumer", name: value}))
        with pytest.raises(Errors.ConfigurationError, match=f"{name}.*does not apply"):
            KafkaConsumer(group_id="g", group_protocol="consumer", bootstrap_servers="127.0.0.1:1",
                          **{name.replace(".", "_"): value})
    with pytest.raises(Errors.ConfigurationError, match="group.remote.assignor.*only to group.protocol=consumer"):
        ConsumerSettings.of(ConsumerConfig({"group.remote.assignor": "uniform"}))
    with pytest.raises(Errors.ConfigurationError, match="group.protocol"):
        ConsumerConfig(group_protocol="streams")
    assert ConsumerConfig(group_protocol="CLASSIC")["group.protocol"] == "classic"


def test_typed_settings_are_built_once_from_the_table():
    from kclient.consumer.consumer_settings import ConsumerSettings, FetchConfig, GroupRebalanceConfig
    s = ConsumerSettings.of(ConsumerConfig(group_id="g", fetch_max_wait_ms=7, session_timeout_ms=10000))
    assert s.fetch.max_wait_ms == 7 and s.rebalance.session_timeout_ms == 10000
    assert s.rebalance.heartbeat_interval_ms == CONSUMER_CONFIGS["heartbeat.interval.ms"].default
    assert FetchConfig.of(s.fetch) is s.fetch                       # a typed part passes through
    with pytest.raises(Errors.ConfigurationError, match="heartbeat.interval.ms.*session.timeout.ms"):
        ConsumerSettings.of(ConsumerConfig(group_id="g", session_timeout_ms=1000))
    # Without a group there is no membership: the pair is not checked.
    assert GroupRebalanceConfig.of(ConsumerConfig(session_timeout_ms=1000)).group_id is None
    with pytest.raises(Errors.ConfigurationError, match="session.timeout.ms"):
        ConsumerConfig(session_timeout_ms=0)
    with pytest.raises(Errors.ConfigurationError, match="heartbeat.interval.ms.*session.timeout.ms"):
        KafkaConsumer(group_id="g", session_timeout_ms=1000, bootstrap_servers="127.0.0.1:1")


def test_kafka_python_plumbing_settings_work_or_fail():
    # Accepted only where kclient does the same thing; anything else would be dropped silently.
    import selectors
    import socket
    assert ConsumerConfig(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])["socket.options"]
    assert ConsumerConfig(selector=selectors.DefaultSelector)["selector"] is selectors.DefaultSelector
    for kwargs, match in (({"socket_options": [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]}, "socket.options"),
                          ({"selector": selectors.SelectSelector}, "selector"),
                          ({"kafka_client": object}, "kafka.client"),
                          ({"metric_reporters": ["x.Reporter"]}, "metric.reporters")):
        with pytest.raises(Errors.ConfigurationError, match=match):
            ConsumerConfig(**kwargs)


# ------------------------------------------------------------------ accepted, but not acted on
NO_EFFECT_CASES = [
    ("metrics_enabled", False), ("metrics.recording.level", "DEBUG"),
    ("sock_chunk_bytes", 8192), ("sock_chunk_buffer_count", 10), ("legacy_iterator", True),
    ("metric_group_prefix", "mine"), ("client_dns_lookup", "resolve_canonical_bootstrap_servers_only"),
]


@pytest.mark.parametrize("key,value", NO_EFFECT_CASES)
def test_a_setting_kclient_does_not_act_on_is_named_in_a_warning(key, value, caplog):
    import kclient.config.config_def as config
    config._warned_no_effect.clear()
    with caplog.at_level("WARNING", logger="kclient.config"):
        ConsumerConfig({key: value})
        ConsumerConfig({key: value})          # the network layer's copy: warned once
    warnings = [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]
    assert len(warnings) == 1 and key in warnings[0] and repr(value) in warnings[0], warnings


# enable.metrics.push: the consumer pushes (KIP-714) or not, as told.
@pytest.mark.parametrize("key,value", [("metrics_enabled", True), ("enable_metrics_push", False),
                                       ("enable_metrics_push", True),
                                       ("legacy_iterator", False), ("client_dns_lookup", "use_all_dns_ips"),
                                       ("api_version", (2, 5, 0))])
def test_a_value_kclient_does_anyway_gives_no_warning(key, value, caplog):
    import kclient.config.config_def as config
    config._warned_no_effect.clear()
    with caplog.at_level("WARNING", logger="kclient.config"):
        ConsumerConfig({key: value})
    assert not [r for r in caplog.records if "has no effect" in r.getMessage()]


@pytest.mark.parametrize("defs", [CONSUMER_CONFIGS, PRODUCER_CONFIGS, ADMIN_CONFIGS],
                         ids=["consumer", "producer", "admin"])
def test_every_setting_documented_as_without_effect_says_why_when_given(defs):
    """A setting is never silently ignored: one documented as having no effect carries the
    reason its warning gives."""
    table = defs if isinstance(defs, dict) else {d.name: d for d in defs}
    silent = [name for name, d in table.items()
              if ("no effect" in d.doc or d.doc.startswith("ignored") or "whatever the value" in d.doc)
              and not d.no_effect and name != "api.version"]
    assert not silent

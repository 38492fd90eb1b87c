"""TLS and SASL against Apache Kafka with SSL, SASL_PLAINTEXT, SASL_SSL and MTLS listeners
(certificates, the PLAIN user and the SCRAM user made by the harness), plus the SCRAM
exchange against RFC 7677's vector and the settings that must fail with a message."""
from __future__ import annotations

import base64
import logging
import time
import uuid

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient
from kclient.config import ConsumerConfig
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.network.sasl import PlainMechanism, ScramMechanism, mechanism_from_config, parse_jaas_config
from kclient.network.tls import build_ssl_context
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition
from kclient.testing.pki import CONNECTION_STRING_USER, P12_PASSWORD, PLAIN_USER, SCRAM_USER

import cloud_recipes
from concurrent_runs import run_at_once

WRONG = "not-the-password-7d1e"


@pytest.fixture(scope="module")
def secure(secure_kafka):
    secure_kafka.create_topic("secure", 1)
    secure_kafka.wait_for_topic("secure", 1)
    return secure_kafka


def tls(secure, **kw) -> dict:
    return {"ssl_cafile": str(secure.pki.ca_file), **kw}


def round_trip(secure, listener: str, settings: dict, value: bytes) -> None:
    """Produce ``value`` and read it back through ``listener`` with ``settings``."""
    bootstrap = secure.bootstrap_for(listener)
    with KafkaProducer(bootstrap_servers=bootstrap, **settings) as p:
        p.send("secure", value, partition=0)
        p.flush(20)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **settings) as c:
        c.assign([TopicPartition("secure", 0)])
        deadline = time.monotonic() + 30
        seen: list = []
        while time.monotonic() < deadline and value not in seen:
            seen += [r.value for rs in c.poll(200).values() for r in rs]
    assert value in seen


def cases(secure):
    pki = secure.pki
    return {
        "ssl (kafka-python names)": ("SSL", {"security_protocol": "SSL", **tls(secure)}),
        "ssl (Java PEM truststore file)": ("SSL", {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                 "ssl.truststore.location": str(pki.ca_file)}),
        "ssl (Java PEM truststore text)": ("SSL", {"security.protocol": "SSL",
                                                 "ssl.truststore.certificates": pki.ca_file.read_text()}),
        "mtls (certfile/keyfile)": ("MTLS", {"security_protocol": "SSL", **tls(secure, ssl_certfile=str(pki.client_cert),
                                                                             ssl_keyfile=str(pki.client_key))}),
        "mtls (Java PEM keystore file)": ("MTLS", {"security.protocol": "SSL", **tls(secure),
                                                  "ssl.keystore.type": "PEM",
                                                  "ssl.keystore.location": str(pki.client_pem)}),
        "mtls (Java PEM key and chain text)": ("MTLS", {"security.protocol": "SSL", **tls(secure),
                                                       "ssl.keystore.key": pki.client_key.read_text(),
                                                       "ssl.keystore.certificate.chain": pki.client_cert.read_text()}),
        "mtls (PKCS12 key and trust stores)": ("MTLS", {
            "security.protocol": "SSL", "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca_p12),
            "ssl.truststore.password": P12_PASSWORD, "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.client_p12), "ssl.keystore.password": P12_PASSWORD}),
        "sasl_plaintext PLAIN": ("SASL_PLAINTEXT", {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                                    "sasl_plain_username": PLAIN_USER[0],
                                                    "sasl_plain_password": PLAIN_USER[1]}),
        "sasl_plaintext SCRAM-SHA-256": ("SASL_PLAINTEXT", {"security_protocol": "SASL_PLAINTEXT",
                                                            "sasl_mechanism": "SCRAM-SHA-256",
                                                            "sasl_plain_username": SCRAM_USER[0],
                                                            "sasl_plain_password": SCRAM_USER[1]}),
        "sasl_ssl SCRAM-SHA-512 (jaas)": ("SASL_SSL", {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", **tls(secure),
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                f'username="{SCRAM_USER[0]}" password="{SCRAM_USER[1]}";'}),
        "sasl_ssl PLAIN (jaas)": ("SASL_SSL", {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", **tls(secure),
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'username="{PLAIN_USER[0]}" password="{PLAIN_USER[1]}";'}),
    }


CASES = ["ssl (kafka-python names)", "ssl (Java PEM truststore file)", "ssl (Java PEM truststore text)",
         "mtls (certfile/keyfile)", "mtls (Java PEM keystore file)", "mtls (Java PEM key and chain text)",
         "mtls (PKCS12 key and trust stores)",
         "sasl_plaintext PLAIN", "sasl_plaintext SCRAM-SHA-256", "sasl_ssl SCRAM-SHA-512 (jaas)",
         "sasl_ssl PLAIN (jaas)"]


@pytest.mark.parametrize("case", CASES)
def test_each_protocol_and_mechanism_produces_and_consumes(secure, case):
    listener, settings = cases(secure)[case]
    round_trip(secure, listener, settings, case.encode())


def test_the_admin_client_connects_over_sasl_ssl(secure):
    _, settings = cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"]
    with KafkaAdminClient(bootstrap_servers=secure.bootstrap_for("SASL_SSL"), **settings) as admin:
        assert "secure" in admin.list_topics()


def poll_until_raises(consumer: KafkaConsumer, timeout_s: float = 30.0) -> BaseException:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            consumer.poll(200)
        except Errors.KafkaError as exc:
            return exc
    raise AssertionError(f"poll() raised nothing in {timeout_s:.0f} s")


def first_error(bootstrap: str, settings: dict, timeout_s: float = 30.0) -> BaseException:
    """The error a consumer raises, from its constructor (which waits for the bootstrap
    servers) or from poll()."""
    try:
        c = KafkaConsumer(bootstrap_servers=bootstrap, **settings)
    except Errors.KafkaError as exc:
        return exc
    with c:
        c.assign([TopicPartition("secure", 0)])
        return poll_until_raises(c, timeout_s)


@pytest.mark.parametrize("mechanism, user", [("PLAIN", PLAIN_USER[0]), ("SCRAM-SHA-256", SCRAM_USER[0])])
def test_a_wrong_password_raises_authentication_failed_without_a_reconnect_storm(secure, mechanism, user, caplog):
    caplog.set_level(logging.DEBUG, logger="kclient")
    settings = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_plain_username=user,
                    sasl_plain_password=WRONG, reconnect_backoff_ms=50, reconnect_backoff_max_ms=2000)
    exc = first_error(secure.bootstrap_for("SASL_PLAINTEXT"), settings)
    assert isinstance(exc, Errors.AuthenticationFailedError)
    assert mechanism in str(exc) and user in str(exc)
    # Paced by reconnect.backoff.max.ms: over 3 s of polling, a few more handshakes at most.
    caplog.clear()
    cnc = ConsumerNetworkClient(config=NetworkClientConfig.of({"bootstrap.servers": secure.bootstrap_for("SASL_PLAINTEXT"), **settings}))
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                cnc.ensure_bootstrapped(100)
            except (Errors.AuthenticationFailedError, Errors.NoBrokersAvailable):
                pass
    finally:
        cnc.close()
    handshakes = caplog.text.count("failed: Authentication failed")
    assert 1 <= handshakes <= 3 * 2, f"{handshakes} failed authentications in 3 s"
    assert WRONG not in caplog.text and WRONG not in str(exc)


def test_secrets_appear_in_no_log_repr_error_or_metric(secure, caplog):
    caplog.set_level(logging.DEBUG)
    _, settings = cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"]
    settings = dict(settings, ssl_password="key-password-5c2a")
    with KafkaConsumer(bootstrap_servers=secure.bootstrap_for("SASL_SSL"), auto_offset_reset="earliest",
                       **settings) as c:
        c.assign([TopicPartition("secure", 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not c.poll(200):
            pass
        shown = caplog.text + repr(c.config) + repr(c._client.client.settings) + repr(c.metrics())
    for secret in (SCRAM_USER[1], "key-password-5c2a"):
        assert secret not in shown
    assert SCRAM_USER[0] in caplog.text or "SCRAM-SHA-512" in caplog.text   # the logs did cover the exchange


def test_an_unknown_ca_fails_verification(secure):
    exc = first_error(secure.bootstrap_for("SSL"), {"security_protocol": "SSL",
                                                   "ssl_cafile": str(secure.pki.other_ca_file)})
    assert isinstance(exc, Errors.SslAuthenticationError)
    assert "verification failed" in str(exc)


def test_a_host_name_mismatch_is_refused_unless_the_check_is_off(secure):
    # The broker's certificate names 127.0.0.1 only: "localhost" does not match.
    as_localhost = secure.bootstrap_for("SSL").replace("127.0.0.1", "localhost")
    exc = first_error(as_localhost, tls(secure, security_protocol="SSL"))
    assert isinstance(exc, Errors.SslAuthenticationError)
    assert "localhost" in str(exc) or "hostname" in str(exc).lower()
    with KafkaConsumer(bootstrap_servers=as_localhost, auto_offset_reset="earliest",
                       **tls(secure, security_protocol="SSL"), ssl_endpoint_identification_algorithm="") as c:
        assert "secure" in c.topics()


def test_ssl_against_a_plaintext_listener_says_the_listener_may_not_speak_tls(secure):
    # Kafka reads the ClientHello as a request of absurd size and hangs up.
    exc = first_error(secure.bootstrap, tls(secure, security_protocol="SSL"))
    assert isinstance(exc, Errors.SslAuthenticationError)
    message = str(exc)
    assert "may not speak TLS" in message and "check security_protocol and the port" in message
    reason = message.split("TLS handshake failed: ", 1)[1].split(";", 1)[0]
    assert reason.strip(), message      # OpenSSL's reason stays, next to the hint


def test_mtls_without_a_client_certificate_fails_cleanly(secure):
    exc = first_error(secure.bootstrap_for("MTLS"), tls(secure, security_protocol="SSL"))
    assert isinstance(exc, Errors.SslAuthenticationError)
    assert "certificate" in str(exc).lower()


# ---------------------------------------------------------------------- units
def test_scram_sha_256_matches_rfc_7677():
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert m.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = m.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert m.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None and m.complete


def test_scram_refuses_a_wrong_server_signature_a_foreign_nonce_and_few_iterations():
    first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    m.first()
    m.step(first)
    with pytest.raises(Errors.AuthenticationFailedError, match="signature"):
        m.step(b"v=" + base64.b64encode(b"x" * 32))
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    m.first()
    with pytest.raises(Errors.AuthenticationFailedError, match="nonce"):
        m.step(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    m.first()
    with pytest.raises(Errors.AuthenticationFailedError, match="iterations"):
        m.step(b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000")
    m = ScramMechanism("SCRAM-SHA-512", "u,=x", "pencil", nonce="abc")
    assert m.first() == b"n,,n=u=2C=3Dx,r=abc"
    with pytest.raises(Errors.AuthenticationFailedError, match="invalid-proof"):
        m.step(b"e=invalid-proof")


def test_plain_message_and_reprs_hide_passwords():
    m = PlainMechanism("alice", "s3cret")
    assert m.first() == b"\0alice\0s3cret"
    assert "s3cret" not in repr(m)
    assert "pencil" not in repr(ScramMechanism("SCRAM-SHA-256", "user", "pencil"))


def test_jaas_config_parsing():
    module, options = parse_jaas_config(
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="a b" password="p\\"q" x=1;')
    assert module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert options == {"username": "a b", "password": 'p"q', "x": "1"}
    with pytest.raises(Errors.ConfigurationError, match="sasl.jaas.config"):
        parse_jaas_config("no semicolon required")


@pytest.mark.parametrize("settings, message", [
    ({"security.protocol": "SASL_SSL"}, "GSSAPI"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "username and a password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-1", "sasl_plain_username": "u",
      "sasl_plain_password": "p"}, "SCRAM-SHA-1"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'},
     "does not provide"),
])
def test_sasl_settings_that_cannot_work_fail_naming_the_problem(settings, message):
    with pytest.raises(Errors.ConfigurationError, match=message):
        mechanism_from_config(ConsumerConfig(settings))


def test_tls_settings_that_cannot_work_fail_naming_the_problem(tmp_path):
    jks = tmp_path / "store.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed")
    with pytest.raises(Errors.ConfigurationError, match="JKS.*convert"):
        build_ssl_context(ConsumerConfig({"ssl.truststore.location": str(jks)}))
    with pytest.raises(Errors.ConfigurationError, match="ssl.endpoint.identification.algorithm"):
        build_ssl_context(ConsumerConfig({"ssl.endpoint.identification.algorithm": "ldap"}))
    with pytest.raises(Errors.ConfigurationError, match="ssl.keyfile"):
        build_ssl_context(ConsumerConfig({"ssl_keyfile": str(jks)}))
    with pytest.raises(Errors.ConfigurationError, match="ssl.cafile.*no such file"):
        build_ssl_context(ConsumerConfig({"ssl_cafile": str(tmp_path / "missing.pem")}))
    ctx = build_ssl_context(ConsumerConfig({"ssl.endpoint.identification.algorithm": ""}))
    assert ctx.check_hostname is False
    assert build_ssl_context(ConsumerConfig({})).check_hostname is True


# ---------------------------------------------------------------------- the other entry points
def test_spark_options_with_the_kafka_prefix_carry_security_settings(secure):
    """The Spark readers' planning and executor-side reading, as mapInArrow runs them."""
    from kclient.spark.planning import plan_offset_ranges
    from kclient.spark.reader import range_rows
    round_trip(secure, *cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"], b"for-spark")
    _, settings = cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"]
    options = {"kafka.bootstrap.servers": secure.bootstrap_for("SASL_SSL"), "subscribe": "secure",
               "startingOffsets": "earliest", "endingOffsets": "latest",
               **{f"kafka.{k}": v for k, v in settings.items()}}
    ranges = plan_offset_ranges(options)
    values = [row[1] for row in range_rows(ranges, options)]
    assert b"for-spark" in values


def test_the_spark_data_source_carries_security_settings(secure):
    """format("kclient"), batch and streaming, as Spark drives it (the reader's methods called
    directly: the options reach the driver's lookups and the executors' clients alike)."""
    pytest.importorskip("pyspark")
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from kclient.spark.datasource import KafkaDataSource
    round_trip(secure, *cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"], b"for-the-source")
    _, settings = cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"]
    options = CaseInsensitiveDict({"kafka.bootstrap.servers": secure.bootstrap_for("SASL_SSL"), "subscribe": "secure",
                                   "startingOffsets": "earliest", **{f"kafka.{k}": v for k, v in settings.items()}})
    source = KafkaDataSource(options)
    batch = source.reader(source.schema())
    values = [v for p in batch.partitions() for b in batch.read(p) for v in b.column("value").to_pylist()]
    assert b"for-the-source" in values
    stream = source.streamReader(source.schema())
    try:
        start = stream.initialOffset()
        end = stream.latestOffset(start, ReadAllAvailable())
        values = [v for p in stream.partitions(start, end) for b in stream.read(p) for v in b.column("value").to_pylist()]
    finally:
        stream.stop()
    assert b"for-the-source" in values


def test_the_console_consumer_reads_over_sasl_ssl(secure):
    import subprocess
    import sys
    _, settings = cases(secure)["sasl_ssl SCRAM-SHA-512 (jaas)"]
    round_trip(secure, "SASL_SSL", settings, b"for-the-console")
    cmd = [sys.executable, "-m", "kclient", "consume", "-b", secure.bootstrap_for("SASL_SSL"), "-t", "secure",
           "--from-beginning", "--idle-timeout-ms", "5000", "-f", "raw"]
    for key, value in settings.items():
        cmd += ["-X", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"for-the-console" in done.stdout


# ---------------------------------------------------------------------- OAUTHBEARER
class CountingProvider:
    """kafka-python's AbstractTokenProvider shape: token() per new connection."""

    def __init__(self, lifetime_s: float = 3600, now_offset: float = 0):
        self.calls = 0
        self.lifetime_s, self.now_offset = lifetime_s, now_offset

    def token(self) -> str:
        from kclient.network.sasl import unsecured_jws
        self.calls += 1
        return unsecured_jws("oauth-user", self.lifetime_s, now=time.time() + self.now_offset)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_oauthbearer_with_a_token_provider_produces_and_consumes(secure, listener):
    provider = CountingProvider()
    settings = {"security_protocol": listener, "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": provider}
    if listener == "SASL_SSL":
        settings.update(tls(secure))
    round_trip(secure, listener, settings, f"oauth-{listener}".encode())
    assert provider.calls >= 2                  # one token per connection, producer and consumer


def test_oauthbearer_with_the_unsecured_jaas_login(secure):
    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                    'unsecuredLoginStringClaim_sub="jaas-user";'}
    round_trip(secure, "SASL_PLAINTEXT", settings, b"oauth-jaas")


def test_an_expired_token_is_refused_and_a_fresh_one_accepted(secure):
    expired = CountingProvider(lifetime_s=60, now_offset=-3600)      # expired an hour ago
    exc = first_error(secure.bootstrap_for("SASL_PLAINTEXT"), {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": expired})
    assert isinstance(exc, Errors.AuthenticationFailedError) and "OAUTHBEARER" in str(exc)
    round_trip(secure, "SASL_PLAINTEXT", {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                                          "sasl_oauth_token_provider": CountingProvider()}, b"oauth-fresh")


def test_oauthbearer_settings_that_cannot_work_fail_naming_the_problem():
    with pytest.raises(Errors.ConfigurationError, match="sasl_oauth_token_provider"):
        mechanism_from_config(ConsumerConfig({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}))
    with pytest.raises(Errors.ConfigurationError, match="token"):
        ConsumerConfig({"sasl_oauth_token_provider": object()})


@pytest.mark.parametrize("challenge, match", [
    # found by python -m bench fuzz (sasl.scram): each raised ValueError/OverflowError, not an auth error
    (b"r=abc123,s=c2FsdA==,i=4096777777777777777777777777777777777777", "more than 16384"),
    (b"r=abc123,s=c2FsdA==,i=" + b"9" * 5000, "more than 16384"),
    (b"r=abc123,s=c2FsdA==,i=\xc2\xb2", "malformed"),
    (b"r=abc123,s=c2Fsd,i=4096", "salt is not base64"),
    (b"r=abc123,s=c2F\xc3\xa9sdA==,i=4096", "salt is not base64"),
    # a hostile broker's iteration count must not make the client hash for minutes
    (b"r=abc123,s=c2FsdA==,i=100000000", "more than 16384"),
])
def test_scram_refuses_a_malformed_or_costly_server_first_message(challenge, match):
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    m.first()
    with pytest.raises(Errors.AuthenticationFailedError, match=match):
        m.step(challenge)


@pytest.mark.parametrize("verifier", [b"v=dDSRyKbVr9YTn/YCgqqyMqBLU1<I7IyKT1Cfk66yRAqsuHJg5tvheRfZQsFl6ACLOaYV3QNl15B5ejd9jxkrvA==",
                                      b"v=\xc3\xa9", b"v=abc"])
def test_scram_refuses_a_server_signature_that_is_not_base64(verifier):
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    m.first()
    m.step(b"r=abc123,s=c2FsdA==,i=4096")
    with pytest.raises(Errors.AuthenticationFailedError, match="signature"):
        m.step(verifier)


def test_scram_accepts_leading_zeros_and_the_maximum_iteration_count():
    for iterations in (b"0004096", b"16384"):
        m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="abc")
        m.first()
        assert m.step(b"r=abc123,s=c2FsdA==,i=" + iterations).startswith(b"c=biws,r=abc123,p=")


# ---------------------------------------------------------------------- KIP-368 re-authentication
def _consume_for(consumer, seconds: float, producer=None, topic: str = "secure", prefix: str = "r") -> list:
    """Poll for ``seconds`` (a producer, if given, sends one record per poll)."""
    seen: list = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        if producer is not None:
            producer.send(topic, f"{prefix}{n}".encode(), partition=0)
            n += 1
        seen += [r.value for rs in consumer.poll(100).values() for r in rs]
    return seen


def _is_disconnect(record: logging.LogRecord) -> bool:
    return record.name == "kclient.network.network_client" and record.getMessage().startswith("disconnected from node")


def _reauthenticated_on_the_same_connection(secure, listener: str, mechanism: str) -> None:
    from kclient.testing.kafka import SASL_SESSION_MS
    user = SCRAM_USER if mechanism.startswith("SCRAM") else PLAIN_USER
    settings = {"security_protocol": listener, "sasl_mechanism": mechanism, "sasl_plain_username": user[0],
                "sasl_plain_password": user[1], **(tls(secure) if listener == "SASL_SSL" else {})}
    bootstrap = secure.bootstrap_for(listener)
    prefix = f"r-{listener}-"                   # this run's records (the other runs write here too)
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, **settings) as producer, \
            KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest", **settings) as consumer:
        consumer.assign([TopicPartition("secure", 0)])
        consumer.poll(100)
        seen = _consume_for(consumer, 2.5 * SASL_SESSION_MS / 1000, producer, prefix=prefix)
        producer.flush(20)
        seen += _consume_for(consumer, 1.0)
        assert consumer._client.client.reauthentications >= 2
        assert producer._client.reauthentications >= 2
        client_metrics = consumer.metrics()["consumer-metrics"]
        assert client_metrics["successful-reauthentication-total"] == consumer._client.client.reauthentications
        assert client_metrics["reauthentication-latency-max"] >= client_metrics["reauthentication-latency-avg"] >= 0
        assert client_metrics["failed-reauthentication-total"] == client_metrics["failed-authentication-total"] == 0
    assert len([v for v in seen if v.startswith(prefix.encode())]) >= 10


def _token_refreshed_in_the_group(secure, group_id: str) -> None:
    from kclient.testing.kafka import SASL_SESSION_MS
    provider = CountingProvider(lifetime_s=4)
    events: list = []

    class Listener:
        def on_partitions_revoked(self, parts):
            events.append(("revoked", sorted(parts)))

        def on_partitions_assigned(self, parts):
            events.append(("assigned", sorted(parts)))

        def on_partitions_lost(self, parts):
            events.append(("lost", sorted(parts)))

    settings = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token_provider": provider}
    with KafkaConsumer(bootstrap_servers=secure.bootstrap_for("SASL_PLAINTEXT"), group_id=group_id,
                       session_timeout_ms=6000, heartbeat_interval_ms=500, **settings) as consumer:
        consumer.subscribe(["secure"], listener=Listener())
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(100)
        generation = consumer._coordinator.generation()
        calls = provider.calls
        _consume_for(consumer, 2.5 * SASL_SESSION_MS / 1000)
        assert consumer._coordinator.generation() == generation
        assert provider.calls >= calls + 2                   # fresh tokens for the re-authentications
        assert consumer._client.client.reauthentications >= 2
        assert [e[0] for e in events] == ["assigned"]        # (close revokes, later)


@pytest.fixture(scope="module")
def session_window(secure):
    """The runs that wait out 2.5 SASL sessions run at the same time, in one window rather than
    one after another; each test below checks its own run, and that no connection of any run
    was closed (logged by the network client as "disconnected from node")."""
    return run_at_once({"SASL_PLAINTEXT": lambda: _reauthenticated_on_the_same_connection(
                            secure, "SASL_PLAINTEXT", "SCRAM-SHA-256"),
                        "SASL_SSL": lambda: _reauthenticated_on_the_same_connection(secure, "SASL_SSL", "PLAIN"),
                        "token": lambda: _token_refreshed_in_the_group(
                            secure, f"g-expiring-token-{uuid.uuid4().hex[:8]}")},
                       "kclient.network.network_client", logging.INFO, keep=_is_disconnect)


@pytest.mark.parametrize("listener,mechanism", [("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN")])
def test_sessions_are_reauthenticated_on_the_same_connection(session_window, listener, mechanism):
    """The broker ends SASL sessions after SASL_SESSION_MS: the client re-authenticates on the
    open connection before that (KIP-368), so nothing disconnects and no record is missed."""
    session_window.check(listener)
    assert not session_window.records, session_window.records


def test_a_session_due_for_reauthentication_takes_no_new_request_before_it(secure):
    """Once a session is due (KIP-368), its connection takes no new request (``is_ready`` and
    ``send_capacity`` say no), whichever path asks, until a network poll has re-authenticated it
    on the same connection: the consumer hands fetches over without a poll (pipelining), and a
    fetch written after the session ended made the broker close the connection."""
    user = SCRAM_USER
    with KafkaConsumer(bootstrap_servers=secure.bootstrap_for("SASL_PLAINTEXT"), auto_offset_reset="latest",
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                       sasl_plain_username=user[0], sasl_plain_password=user[1]) as consumer:
        consumer.assign([TopicPartition("secure", 0)])
        consumer.poll(100)
        net = consumer._client.client
        node = next(n for n, c in net._conns.items() if c.reauth_due_ms is not None)
        conn = net._conns[node]
        before = net.reauthentications
        with consumer._client._lock:
            conn.reauth_due_ms = net._clock.now_ms() - 1          # the session is due now
            assert not net.is_ready(node) and net.send_capacity(node) == 0
            assert not conn.reauthenticating                     # only a network poll starts it
        deadline = time.monotonic() + 20
        while net.reauthentications == before and time.monotonic() < deadline:
            consumer.poll(100)
        assert net.reauthentications == before + 1
        assert net._conns[node] is conn and conn.sock is not None
        assert net.send_capacity(node) > 0 or net.in_flight_request_count(node) > 0


def test_an_expiring_token_is_refreshed_without_losing_the_group_membership(session_window):
    """OAUTHBEARER tokens that expire every 4 s: each re-authentication takes a fresh token from
    the provider, and the group member keeps its generation and partition throughout."""
    session_window.check("token")
    assert not session_window.records, session_window.records


def test_pkcs12_stores_with_a_wrong_password_fail_naming_the_setting(secure):
    for setting, store in (("ssl.keystore", secure.pki.client_p12), ("ssl.truststore", secure.pki.ca_p12)):
        with pytest.raises(Errors.ConfigurationError, match=rf"{setting}.location.*wrong password"):
            KafkaConsumer(bootstrap_servers=secure.bootstrap_for("MTLS"), security_protocol="SSL",
                          **{f"{setting}.type": "PKCS12", f"{setting}.location": str(store),
                             f"{setting}.password": "not-" + P12_PASSWORD})


# ---------------------------------------------------------------------- docs/cloud.md's recipes
def _recipe_locals(secure) -> dict[str, tuple[str, dict]]:
    """Per recipe run on this broker: the listener, and the local value of each placeholder."""
    pki, ca = secure.pki, {"ssl_cafile": str(secure.pki.ca_file)}
    plain = {"sasl_plain_username": PLAIN_USER[0], "sasl_plain_password": PLAIN_USER[1], **ca}
    return {
        "confluent-cloud-api-key": ("SASL_SSL", plain),
        "msk-scram": ("SASL_SSL", {"sasl_plain_username": SCRAM_USER[0], "sasl_plain_password": SCRAM_USER[1], **ca}),
        "event-hubs-connection-string": ("SASL_SSL", {"sasl_plain_password": CONNECTION_STRING_USER[1], **ca}),
        "google-managed-kafka": ("SASL_SSL", plain),
        "aiven-mtls": ("MTLS", {"ssl_cafile": str(pki.ca_file), "ssl_certfile": str(pki.client_cert),
                                "ssl_keyfile": str(pki.client_key)}),
    }


# Run elsewhere: the OAuth recipes against the OIDC listener (test_oidc.py); MSK IAM only MSK's
# brokers can check (its signed document is checked in tests/unit/network/test_aws_msk_iam.py).
RECIPES_RUN_ELSEWHERE = {"confluent-cloud-oauth", "event-hubs-oauth", "msk-iam"}


def test_every_recipe_of_the_cloud_page_is_run_somewhere(secure):
    assert set(cloud_recipes.recipes()) == set(_recipe_locals(secure)) | RECIPES_RUN_ELSEWHERE


@pytest.mark.parametrize("name", ["confluent-cloud-api-key", "msk-scram", "event-hubs-connection-string",
                                  "google-managed-kafka", "aiven-mtls"])
def test_a_cloud_recipe_reads_and_writes_on_a_listener_of_its_kind(secure, name):
    listener, local = _recipe_locals(secure)[name]
    settings = cloud_recipes.fill(cloud_recipes.recipes()[name], {"bootstrap_servers": secure.bootstrap_for(listener),
                                                                  **local})
    value = f"recipe {name}".encode()
    producer_settings = {k: v for k, v in settings.items() if k != "group_id"}
    with KafkaProducer(**producer_settings) as p:
        p.send("secure", value, partition=0)
        p.flush(20)
    with KafkaConsumer(auto_offset_reset="earliest", **settings) as c:
        c.assign([TopicPartition("secure", 0)])
        deadline = time.monotonic() + 30
        seen: list = []
        while time.monotonic() < deadline and value not in seen:
            seen += [r.value for rs in c.poll(200).values() for r in rs]
    assert value in seen

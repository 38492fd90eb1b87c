"""OAUTHBEARER with tokens from an OAuth token endpoint (OIDC): the token checks and the refresh
schedule on a fake clock, the settings in Java's and librdkafka's names, the token endpoint of
kclient.testing.oidc, and Apache Kafka's OIDC listener validating the tokens (JWKS)."""
from __future__ import annotations

import base64
import contextlib
import json
import logging
import random
import re
import threading
import time
import uuid

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient
from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.network.oauth import (JWT_BEARER, AccessToken, OAuthSettings, OAuthTokenProvider, TokenEndpointError,
                                   fetch_token, parse_access_token)
from kclient.network.network_config import NetworkClientConfig
from kclient.network.sasl import mechanism_from_config, oauth_provider_from_config
from kclient.producer import KafkaProducer
from kclient.testing._base import free_port
from kclient.testing.kafka import KafkaCluster
from kclient.testing.maven import MavenError
from kclient.testing.oidc import TokenEndpoint
from kclient.structs import TopicPartition

import cloud_recipes
from concurrent_runs import run_at_once

CLIENT, SECRET = "orders-app", "s3cr3t-9f2c41d0e8"
WRONG = "wrong-secret-77ab01"
LIFETIME_S = 10
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def jwt(claims: dict, header: dict | None = None) -> str:
    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{b64(header or {'alg': 'RS256'})}.{b64(claims)}.c2ln"


def styles(url: str, secret: str = SECRET) -> dict[str, dict]:
    """The same login in each naming style kclient takes."""
    base = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}
    return {
        "java-jaas": {**base, "sasl.login.callback.handler.class": HANDLER,
                      "sasl.oauthbearer.token.endpoint.url": url,
                      "sasl.jaas.config": f'{MODULE} required clientId="{CLIENT}" clientSecret="{secret}" '
                                          'scope="kafka";'},
        "java-4.1": {**base, "sasl.login.callback.handler.class": HANDLER,
                     "sasl.oauthbearer.token.endpoint.url": url,
                     "sasl.oauthbearer.jwt.retriever.class":
                         "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
                     "sasl.jaas.config": f"{MODULE} required ;",
                     "sasl.oauthbearer.client.credentials.client.id": CLIENT,
                     "sasl.oauthbearer.client.credentials.client.secret": secret,
                     "sasl.oauthbearer.scope": "kafka"},
        "librdkafka": {**base, "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": url,
                       "sasl.oauthbearer.client.id": CLIENT, "sasl.oauthbearer.client.secret": secret,
                       "sasl.oauthbearer.scope": "kafka"},
    }


# ---------------------------------------------------------------------- token checks
NOW_MS = 1_700_000_000_000


def test_a_jwt_with_a_future_expiry_and_a_subject_is_accepted():
    token = parse_access_token(jwt({"sub": "app", "exp": NOW_MS // 1000 + 60}), None, NOW_MS)
    assert token.subject == "app" and token.lifetime_ms == 60_000
    assert "eyJ" not in repr(token)                 # the token itself is not shown
    # expires_in sooner than exp wins
    assert parse_access_token(jwt({"sub": "app", "exp": NOW_MS // 1000 + 60}), 30, NOW_MS).lifetime_ms == 30_000


@pytest.mark.parametrize("value,reason", [
    (jwt({"sub": "app", "exp": NOW_MS // 1000 - 120}), "expired"),
    ("opaque-token", "3 dot-separated parts"),
    ("a.b", "3 dot-separated parts"),
    ("!!!.e30.x", "header is not base64url JSON"),
    (jwt({"sub": "app"}), "no numeric expiry"),
    (jwt({"sub": "app", "exp": "soon"}), "no numeric expiry"),
    (jwt({"exp": NOW_MS // 1000 + 60}), "no subject"),
    (jwt({"sub": "app", "exp": NOW_MS // 1000 + 60}, header={"typ": "JWT"}), "no algorithm"),
    (None, "no access_token"),
])
def test_expired_or_malformed_tokens_are_refused_with_their_reason(value, reason):
    with pytest.raises(TokenEndpointError, match=reason):
        parse_access_token(value, None, NOW_MS)


# ---------------------------------------------------------------------- the schedule (fake clock)
def _provider(clock: FakeClock, answers: list, **kw) -> OAuthTokenProvider:
    def fetch() -> AccessToken:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        wall = clock.wall_ms()
        return AccessToken(f"t{answer}", "app", wall + answer, answer)
    settings = OAuthSettings(token_url="http://127.0.0.1:1/token", client_id=CLIENT, client_secret=SECRET, **kw)
    return OAuthTokenProvider(settings, clock=clock, rng=random.Random(7), fetch=fetch)


def test_tokens_are_refreshed_at_80_to_85_percent_of_their_lifetime():
    clock = FakeClock()
    provider = _provider(clock, [10_000, 10_000, 10_000])
    start = clock.now_ms()
    due = provider.step(start)
    assert provider.fetches == 1 and provider.token() == "t10000"
    assert start + 8_000 <= due <= start + 8_500
    assert provider.step(due - 1) == due and provider.fetches == 1       # not yet
    clock.advance(due - start)
    second = provider.step(clock.now_ms())
    assert provider.fetches == 2 and due + 8_000 <= second <= due + 8_500


def test_failed_fetches_back_off_exponentially_up_to_the_maximum():
    clock = FakeClock()
    refused = TokenEndpointError("the token endpoint refused the client with HTTP 401: invalid_client", 401)
    provider = _provider(clock, [refused] * 8 + [5_000], retry_backoff_ms=100, retry_backoff_max_ms=1000)
    waits = []
    for _ in range(8):
        due = provider.step(clock.now_ms())
        waits.append(due - clock.now_ms())
        with pytest.raises(TokenEndpointError, match="401: invalid_client"):
            provider.token()                        # no valid token: the failure, at once, no new request
        clock.advance(due - clock.now_ms())
    assert waits == [100, 200, 400, 800, 1000, 1000, 1000, 1000] and provider.fetches == 8
    assert provider.token() == "t5000"              # due again: fetched (no thread: on the caller's)


def test_a_valid_token_is_kept_while_refreshes_fail_and_dropped_once_it_expires():
    clock = FakeClock()
    down = TokenEndpointError("cannot reach the token endpoint http://127.0.0.1:1/token")
    provider = _provider(clock, [10_000] + [down] * 20)
    due = provider.step(clock.now_ms())
    clock.advance(due - clock.now_ms())
    provider.step(clock.now_ms())                   # the refresh fails
    assert provider.token() == "t10000"             # still valid: used, no wait
    while clock.now_ms() < due + 3_000:
        clock.advance(max(1, provider.due_ms() - clock.now_ms()))
        provider.step(clock.now_ms())
    with pytest.raises(TokenEndpointError, match="cannot reach"):
        provider.token()


def test_the_refresh_thread_is_owned_by_the_provider_and_stops_with_its_last_user():
    endpoint = TokenEndpoint({CLIENT: SECRET}, lifetime_s=2).start()
    try:
        provider = oauth_provider_from_config(ConsumerConfig(styles(endpoint.token_url)["librdkafka"]))
        provider.start()
        provider.start()                            # a second client sharing it
        deadline = time.monotonic() + 10
        while provider.fetches < 2:                 # the first token, then a refresh with no caller
            assert time.monotonic() < deadline, "no background refresh"
            time.sleep(0.05)
        assert provider.token().count(".") == 2
        provider.close()
        assert any(t.name == "kclient-oauth-token" for t in threading.enumerate())
        provider.close()
        assert not any(t.name == "kclient-oauth-token" and t.is_alive() for t in threading.enumerate())
    finally:
        endpoint.stop()


# ---------------------------------------------------------------------- settings
@pytest.mark.parametrize("style", ["java-jaas", "java-4.1", "librdkafka"])
def test_each_naming_style_configures_the_same_login(style):
    provider = oauth_provider_from_config(ConsumerConfig(styles("https://idp.example/token")[style]))
    s = provider.settings
    assert (s.token_url, s.client_id, s.client_secret, s.scope) == ("https://idp.example/token", CLIENT, SECRET,
                                                                     "kafka")
    assert s.ssl_context is not None and s.ssl_context.verify_mode.name == "CERT_REQUIRED"
    assert SECRET not in repr(provider) and SECRET not in repr(s)


def test_settings_are_shared_by_consumer_producer_and_admin_tables():
    from kclient.config import AdminClientConfig, ProducerConfig
    for table in (ConsumerConfig, ProducerConfig, AdminClientConfig):
        config = table(styles("https://idp.example/token")["java-4.1"])
        assert SECRET not in repr(config)
    assert SECRET not in repr(ConsumerConfig(styles("https://idp.example/token")["librdkafka"]))


def test_extensions_and_the_jwt_bearer_grant(tmp_path):
    assertion = tmp_path / "assertion.jwt"
    assertion.write_text(jwt({"sub": CLIENT, "exp": 2_000_000_000}))
    c = ConsumerConfig({**styles("https://idp.example/token")["java-4.1"],
                        "sasl.oauthbearer.jwt.retriever.class":
                            "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever",
                        "sasl.oauthbearer.assertion.file": str(assertion),
                        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"})
    provider = oauth_provider_from_config(c)
    assert provider.settings.grant_type == JWT_BEARER
    assert provider.extensions() == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}


@pytest.mark.parametrize("settings,message", [
    ({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET}, "needs sasl.oauthbearer.token.endpoint.url"),
    ({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
      "sasl.oauthbearer.client.id": CLIENT}, "needs a client id and a client secret"),
    ({"sasl.oauthbearer.token.endpoint.url": "ftp://idp/token", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET}, "is not an https://"),
    ({"sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.client.credentials.client.secret": "other"},
     "client secret is given twice"),
    ({"sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.extensions": "auth=x"}, "other than 'auth'"),
    ({"sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.client.id": CLIENT,
      "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.ssl.truststore.location": "/nonexistent.pem"},
     "CA certificates cannot be loaded"),
])
def test_settings_that_cannot_work_fail_naming_the_problem_without_the_secret(settings, message):
    base = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
    with pytest.raises(Errors.ConfigurationError, match=message) as exc:
        NetworkClientConfig.of(ConsumerConfig({**base, **settings}))
    assert SECRET not in str(exc.value)


def test_other_login_classes_and_secret_values_of_the_wrong_type_are_refused_without_showing_them():
    with pytest.raises(Errors.ConfigurationError, match="OAuthBearerLoginCallbackHandler"):
        ConsumerConfig({"sasl.login.callback.handler.class": "com.example.MyHandler"})
    with pytest.raises(Errors.ConfigurationError, match="secret") as exc:
        ConsumerConfig({"sasl.oauthbearer.client.secret": 123456789})
    assert "123456789" not in str(exc.value)


# ---------------------------------------------------------------------- the token endpoint
@pytest.fixture
def endpoint():
    with TokenEndpoint({CLIENT: SECRET}, lifetime_s=LIFETIME_S) as ep:
        yield ep


def _settings(ep: TokenEndpoint, secret: str = SECRET, **kw) -> OAuthSettings:
    return OAuthSettings(token_url=ep.token_url, client_id=CLIENT, client_secret=secret, **kw)


def test_the_endpoint_issues_rs256_jwts_that_its_jwks_verifies(endpoint):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    token = fetch_token(_settings(endpoint, scope="kafka"), lambda: int(time.time() * 1000))
    assert token.subject == CLIENT and 0 < token.lifetime_ms <= LIFETIME_S * 1000
    key = endpoint.jwks()["keys"][0]

    def num(v: str) -> int:
        return int.from_bytes(base64.urlsafe_b64decode(v + "=" * (-len(v) % 4)), "big")
    public = rsa.RSAPublicNumbers(num(key["e"]), num(key["n"])).public_key()
    head, body, sig = token.value.split(".")
    public.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), f"{head}.{body}".encode(),
                  padding.PKCS1v15(), hashes.SHA256())
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    assert claims["aud"] == endpoint.audience and claims["scope"] == "kafka" and claims["iss"] == endpoint.issuer
    # the client id and secret as form fields are taken too
    assert endpoint.answer({"grant_type": "client_credentials", "client_id": CLIENT, "client_secret": SECRET},
                           None)[0] == 200


def test_a_wrong_secret_names_the_endpoint_and_its_answer(endpoint):
    with pytest.raises(TokenEndpointError) as exc:
        fetch_token(_settings(endpoint, WRONG), lambda: int(time.time() * 1000))
    text = str(exc.value)
    assert exc.value.status == 401 and "401" in text and "invalid_client" in text and endpoint.token_url in text
    assert "authentication failed" in text and WRONG not in text


def test_an_unreachable_endpoint_is_named():
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}/token"
    with pytest.raises(TokenEndpointError, match="cannot reach the token endpoint " + url):
        fetch_token(OAuthSettings(token_url=url, client_id=CLIENT, client_secret=SECRET, connect_timeout_ms=2000),
                    lambda: int(time.time() * 1000))


@pytest.mark.parametrize("issue,reason", [("expired", "has expired"), ("malformed", "malformed")])
def test_expired_or_malformed_tokens_from_the_endpoint_are_refused(endpoint, issue, reason):
    endpoint.issue = issue
    with pytest.raises(TokenEndpointError, match=reason):
        fetch_token(_settings(endpoint), lambda: int(time.time() * 1000))


def test_the_jwt_bearer_grant_posts_the_assertion(endpoint, tmp_path):
    assertion = tmp_path / "assertion.jwt"
    assertion.write_text(endpoint.make_token(CLIENT, lifetime_s=60))
    token = fetch_token(OAuthSettings(token_url=endpoint.token_url, grant_type=JWT_BEARER,
                                      assertion_file=str(assertion)), lambda: int(time.time() * 1000))
    assert token.subject == CLIENT


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_the_jwt_bearer_grant_signs_a_fresh_assertion_with_the_private_key(endpoint, tmp_path, algorithm):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    def new_key():
        return (rsa.generate_private_key(public_exponent=65537, key_size=2048) if algorithm == "RS256"
                else ec.generate_private_key(ec.SECP256R1()))
    key, other = new_key(), new_key()
    endpoint.assertion_public_key = key.public_key()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(b"key-pass-31")).decode()
    (tmp_path / "key.pem").write_text(pem)
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.endpoint.url": endpoint.token_url,
                "sasl.oauthbearer.grant.type": JWT_BEARER, "sasl.oauthbearer.assertion.algorithm": algorithm,
                "sasl.oauthbearer.assertion.private.key.file": str(tmp_path / "key.pem"),
                "sasl.oauthbearer.assertion.private.key.passphrase": "key-pass-31",
                "sasl.oauthbearer.assertion.claim.sub": CLIENT, "sasl.oauthbearer.assertion.claim.iss": CLIENT,
                "sasl.oauthbearer.assertion.claim.aud": endpoint.token_url,
                "sasl.oauthbearer.assertion.claim.jti.include": True}
    provider = oauth_provider_from_config(ConsumerConfig(settings))
    assert provider.token().count(".") == 2
    assert "key-pass-31" not in repr(ConsumerConfig(settings))
    # signed by a key the endpoint does not trust: refused, with the endpoint's answer
    (tmp_path / "other.pem").write_text(other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode())
    provider = oauth_provider_from_config(ConsumerConfig({
        **settings, "sasl.oauthbearer.assertion.private.key.file": str(tmp_path / "other.pem"),
        "sasl.oauthbearer.assertion.private.key.passphrase": None}))
    with pytest.raises(TokenEndpointError, match="HTTP 400: invalid_grant"):
        provider.token()
    with pytest.raises(Errors.ConfigurationError, match="wrong passphrase|not a PEM") as exc:
        oauth_provider_from_config(ConsumerConfig({**settings,
                                                   "sasl.oauthbearer.assertion.private.key.passphrase": "nope-1"}))
    assert "nope-1" not in str(exc.value)


def test_a_token_file_url_is_read_at_each_fetch(endpoint, tmp_path):
    path = tmp_path / "token"
    path.write_text(endpoint.make_token("from-file"))
    token = fetch_token(OAuthSettings(token_url=path.as_uri()), lambda: int(time.time() * 1000))
    assert token.subject == "from-file"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from kclient.testing.pki import TestPki
    return TestPki.create(tmp_path_factory.mktemp("pki"))


def test_an_https_endpoint_is_verified_with_the_given_or_the_system_cas(pki):
    with TokenEndpoint({CLIENT: SECRET}, certfile=str(pki.broker_pem)) as ep:
        assert ep.token_url.startswith("https://127.0.0.1:")
        for trust in ({"sasl.oauthbearer.ssl.truststore.location": str(pki.ca_file)},
                      {"sasl.oauthbearer.ssl.truststore.certificates": pki.ca_file.read_text()},
                      {"https.ca.location": str(pki.ca_file)}, {"https.ca.pem": pki.ca_file.read_text()}):
            provider = oauth_provider_from_config(ConsumerConfig({**styles(ep.token_url)["librdkafka"], **trust}))
            assert provider.token().count(".") == 2
        refused = [({}, ep.token_url, "CERTIFICATE_VERIFY_FAILED"),          # the system's CAs do not know it
                   ({"https.ca.location": str(pki.other_ca_file)}, ep.token_url, "CERTIFICATE_VERIFY_FAILED"),
                   ({"https.ca.location": str(pki.ca_file)}, ep.token_url.replace("127.0.0.1", "localhost"),
                    "(?i)hostname|IP address mismatch|doesn't match")]
        for trust, url, reason in refused:
            provider = oauth_provider_from_config(ConsumerConfig({**styles(url)["librdkafka"], **trust}))
            with pytest.raises(TokenEndpointError, match=f"cannot reach the token endpoint {url}"):
                provider.token()
            assert provider._error is not None and re.search(reason, str(provider._error))


# ---------------------------------------------------------------------- Apache Kafka
@pytest.fixture(scope="module")
def oidc_kafka():
    endpoint = TokenEndpoint({CLIENT: SECRET}, lifetime_s=LIFETIME_S).start()
    try:
        # Sessions end with the token (10 s), not sooner: each re-authentication needs a fresh one.
        cluster = KafkaCluster(oidc=endpoint, oidc_session_ms=600_000).start()
    except MavenError as exc:
        endpoint.stop()
        pytest.skip(f"Apache Kafka is unavailable: {exc}")
    try:
        cluster.create_topic("oidc", 1)
        cluster.wait_for_topic("oidc", 1)
        yield cluster
    finally:
        cluster.stop()
        endpoint.stop()


def _wait_assigned(consumer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(100)


class _Bounded:
    def __init__(self, producer):
        self.producer = producer

    def close(self):
        self.producer.close(10)


def _member_across_expiries(cluster, style: str) -> None:
    """A group member and a producer in one naming style for 2.5 token lifetimes: every
    connection re-authenticates with a fresh token (KIP-368) before its session ends; no error,
    no rejoin, every record read and committed. Each client fetches its third token at 1.6-1.7
    lifetimes and re-authenticates a second time by about 1.8: 2.5 leaves the asserted counts
    most of a lifetime of margin, and a client that does not re-authenticate has its session
    ended by the broker after one lifetime."""
    settings = styles(cluster.oidc.token_url)[style]
    events: list = []

    class Listener:
        def on_partitions_revoked(self, parts):
            events.append("revoked")

        def on_partitions_assigned(self, parts):
            events.append("assigned")

        def on_partitions_lost(self, parts):
            events.append("lost")

    producer = KafkaProducer(bootstrap_servers=cluster.oidc_bootstrap, **settings)
    # closed with a bound: a failure inside must be reported, not wait on undelivered records
    with contextlib.closing(_Bounded(producer)), \
            KafkaConsumer(bootstrap_servers=cluster.oidc_bootstrap, group_id=f"g-oidc-expiries-{style}-{uuid.uuid4().hex[:8]}",
                          auto_offset_reset="latest", enable_auto_commit=False, session_timeout_ms=6000,
                          heartbeat_interval_ms=500, **settings) as consumer:
        consumer.subscribe(["oidc"], listener=Listener())
        _wait_assigned(consumer)
        generation = consumer._coordinator.generation()
        sent: list[bytes] = []
        seen: list[bytes] = []
        end = time.monotonic() + 2.5 * LIFETIME_S
        while time.monotonic() < end:
            value = f"{style}-{len(sent)}".encode()
            producer.send("oidc", value, partition=0)
            sent.append(value)
            seen += [r.value for rs in consumer.poll(200).values() for r in rs]
            consumer.commit()
        producer.flush(20)
        deadline = time.monotonic() + 20
        while set(sent) - set(seen) and time.monotonic() < deadline:
            seen += [r.value for rs in consumer.poll(200).values() for r in rs]
        consumer.commit()
        assert not set(sent) - set(seen), f"{style}: records not read"
        assert consumer._coordinator.generation() == generation, f"{style}: rejoined"
        assert events == ["assigned"], f"{style}: {events}"
        assert consumer._client.client.reauthentications >= 2, style
        assert producer._client.reauthentications >= 2, style
        # each client refreshed its token 3 times (token requests of this style's two clients)
        fetches = (consumer._client.client.settings.token_provider.fetches
                   + producer._client.settings.token_provider.fetches)
    assert fetches >= 2 * 3, f"{style}: {fetches} token requests"


def _pacemaker_across_expiries(cluster) -> None:
    """The pacemaker's sessions end with the token (10 s): over 1.6 lifetimes it authenticates
    again with a token the OIDC client fetched since, and the member stays in its generation."""
    settings = styles(cluster.oidc.token_url)["librdkafka"]
    with KafkaConsumer(bootstrap_servers=cluster.oidc_bootstrap, group_id=f"g-oidc-pacemaker-{uuid.uuid4().hex[:8]}",
                       auto_offset_reset="latest", enable_auto_commit=False, session_timeout_ms=6000,
                       heartbeat_interval_ms=500, **settings) as consumer:
        consumer.subscribe(["oidc"])
        _wait_assigned(consumer)
        generation = consumer._coordinator.generation()
        link = consumer._coordinator.heartbeat_driver
        assert hasattr(link, "pacemaker"), "the Python heartbeat thread heartbeats, not the pacemaker"
        end = time.monotonic() + 1.6 * LIFETIME_S
        while time.monotonic() < end:
            consumer.poll(200)
        stats = link.pacemaker.stats()
        assert stats["authentications"] >= 2 and stats["failed"] == 0, stats
        assert stats["received"] >= LIFETIME_S, stats
        assert consumer._coordinator.generation() == generation


def _idle_clients_across_expiries(cluster) -> None:
    """An admin client and a consumer that does not poll for longer than a token lives: the
    provider's thread refreshed the token, so their next calls authenticate."""
    settings = styles(cluster.oidc.token_url)["java-4.1"]
    with KafkaAdminClient(bootstrap_servers=cluster.oidc_bootstrap, **settings) as admin, \
            KafkaConsumer(bootstrap_servers=cluster.oidc_bootstrap, **settings) as consumer:
        assert "oidc" in admin.list_topics()
        assert "oidc" in consumer.topics()
        provider = consumer._client.client.settings.token_provider
        fetches = provider.fetches
        deadline = time.monotonic() + 3 * LIFETIME_S
        while provider.fetches < fetches + 2:                # refreshed with nobody polling
            assert time.monotonic() < deadline, "no refresh while idle"
            time.sleep(0.2)
        assert "oidc" in admin.list_topics()
        assert consumer.end_offsets([_tp()])[_tp()] >= 0


@pytest.fixture(scope="module")
def token_expiry_window(oidc_kafka):
    """The runs that must outlast several token lifetimes run at the same time, in one window
    of 2.5 lifetimes rather than one after another; each test below checks its own run."""
    return run_at_once({"java-jaas": lambda: _member_across_expiries(oidc_kafka, "java-jaas"),
                        "librdkafka": lambda: _member_across_expiries(oidc_kafka, "librdkafka"),
                        "pacemaker": lambda: _pacemaker_across_expiries(oidc_kafka),
                        "idle": lambda: _idle_clients_across_expiries(oidc_kafka)},
                       "kclient", logging.WARNING)


@pytest.mark.parametrize("style", ["java-jaas", "librdkafka"])
def test_a_group_member_reads_and_commits_across_token_expiries(token_expiry_window, style):
    """10 s tokens for 25 s: every connection re-authenticates with a fresh token (KIP-368)
    before its session ends; no error, no rejoin, every record read and committed. No kclient
    warning while any of the window's runs was going on."""
    token_expiry_window.check(style)
    assert token_expiry_window.records == []


def test_the_pacemaker_authenticates_each_session_with_the_newest_token(token_expiry_window):
    """The GIL-free pacemaker's own connection logs in with the token the client holds; its
    sessions end with the token (10 s), so over 1.6 lifetimes it authenticates again with a
    token the OIDC client fetched since, and the member stays in its generation."""
    token_expiry_window.check("pacemaker")


def test_the_admin_client_and_an_idle_consumer_keep_valid_sessions(token_expiry_window):
    """An admin client and a consumer that does not poll for longer than a token lives: the
    provider's thread refreshed the token, so their next calls authenticate."""
    token_expiry_window.check("idle")


def _tp():
    from kclient.structs import TopicPartition
    return TopicPartition("oidc", 0)


def test_a_wrong_secret_fails_fast_naming_the_endpoints_answer_with_no_retry_storm(oidc_kafka, caplog):
    endpoint = oidc_kafka.oidc
    caplog.set_level(logging.DEBUG)
    before = endpoint.refusals
    started = time.monotonic()
    settings = styles(endpoint.token_url, secret=WRONG)["librdkafka"]
    with pytest.raises(Errors.AuthenticationFailedError) as exc:
        with KafkaConsumer(bootstrap_servers=oidc_kafka.oidc_bootstrap, **settings) as consumer:
            consumer.assign([_tp()])
            while time.monotonic() - started < 30:
                consumer.poll(200)
    elapsed = time.monotonic() - started
    text = str(exc.value)
    assert elapsed < 25, elapsed
    assert "authentication" in text and "401" in text and "invalid_client" in text and endpoint.token_url in text
    assert endpoint.refusals - before <= 8, endpoint.refusals - before      # backoff, not a storm
    assert WRONG not in text
    assert not [r for r in caplog.records if WRONG in r.getMessage()]


def test_an_unreachable_endpoint_is_named_in_the_error(oidc_kafka):
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}/token"
    settings = styles(url)["java-4.1"]
    started = time.monotonic()
    with pytest.raises(Errors.AuthenticationFailedError, match="cannot reach the token endpoint " + url):
        with KafkaProducer(bootstrap_servers=oidc_kafka.oidc_bootstrap, max_block_ms=20000, **settings) as p:
            p.send("oidc", b"x", partition=0).get(20)
    assert time.monotonic() - started < 25


def test_a_token_the_broker_cannot_verify_is_refused_with_its_reason(oidc_kafka):
    """Signed by another key than the listener's JWKS holds: the broker's refusal is the error."""
    with TokenEndpoint({CLIENT: SECRET}, audience=oidc_kafka.oidc.audience) as impostor:
        token = impostor.make_token(CLIENT)

    class Provider:
        def token(self):
            return token
    with pytest.raises(Errors.AuthenticationFailedError, match="OAUTHBEARER.*(invalid_token|signature|kid)") as exc:
        with KafkaConsumer(bootstrap_servers=oidc_kafka.oidc_bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider()) as consumer:
            consumer.assign([_tp()])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                consumer.poll(200)
    assert token not in str(exc.value)


def test_the_secret_never_appears_in_logs_reprs_metrics_or_errors(oidc_kafka, caplog):
    caplog.set_level(logging.DEBUG)
    settings = styles(oidc_kafka.oidc.token_url)["java-jaas"]
    with KafkaConsumer(bootstrap_servers=oidc_kafka.oidc_bootstrap, auto_offset_reset="earliest",
                       **settings) as consumer:
        consumer.assign([_tp()])
        consumer.poll(500)
        shown = [repr(consumer.config), repr(consumer._client.client.settings),
                 repr(consumer._client.client.settings.token_provider), json.dumps(consumer.metrics(), default=str)]
    with pytest.raises(Errors.ConfigurationError) as exc:
        mechanism_from_config(ConsumerConfig({**settings, "sasl.oauthbearer.client.credentials.client.secret": "x"}))
    shown.append(str(exc.value))
    shown += [r.getMessage() for r in caplog.records]
    assert not [s for s in shown if SECRET in s]


# ---------------------------------------------------------------------- docs/cloud.md's OAuth recipes
@pytest.mark.parametrize("name", ["confluent-cloud-oauth", "event-hubs-oauth"])
def test_a_cloud_oauth_recipe_reads_and_writes_on_the_oidc_listener(oidc_kafka, name):
    recipe = cloud_recipes.recipes()[name]
    assert recipe["security_protocol"] == "SASL_SSL"
    settings = cloud_recipes.fill(recipe, {
        "bootstrap_servers": oidc_kafka.oidc_bootstrap,
        "sasl_oauthbearer_token_endpoint_url": oidc_kafka.oidc.token_url,
        "sasl_oauthbearer_client_id": CLIENT, "sasl_oauthbearer_client_secret": SECRET,
        "sasl_oauthbearer_scope": "kafka",
        "sasl_oauthbearer_extensions": "logicalCluster=lkc-local,identityPoolId=pool-local"})
    settings["security_protocol"] = "SASL_PLAINTEXT"       # the local OIDC listener has no TLS
    value = f"recipe {name}".encode()
    with KafkaProducer(**{k: v for k, v in settings.items() if k != "group_id"}) as p:
        p.send("oidc", value, partition=0)
        p.flush(20)
    with KafkaConsumer(auto_offset_reset="earliest", **settings) as c:
        c.assign([TopicPartition("oidc", 0)])
        deadline = time.monotonic() + 30
        seen: list = []
        while time.monotonic() < deadline and value not in seen:
            seen += [r.value for rs in c.poll(200).values() for r in rs]
    assert value in seen

"""Settings every client takes, as Kafka's ``CommonClientConfigs``: connections, security and
metrics, with Kafka's documented defaults, and kafka-python's keywords for them.

Each client's table (``consumer_config``, ``producer_config``, ``admin_config``) starts from
these definitions, so a shared setting has one name, type, range and doc everywhere.
"""
from __future__ import annotations

from typing import Any

from kclient.config.config_def import (ConfigDef, parse_bootstrap_servers, only_empty, unsupported,
                                       upper_choice)
from kclient.errors import ConfigurationError

__all__ = ["common_client_defs", "oauth_defs"]


def _nodelay_only(name: str, value: Any) -> Any:
    """kafka-python code passes its default [(IPPROTO_TCP, TCP_NODELAY, 1)]; kclient sets exactly
    that on every socket. Any other option would be silently dropped, so it fails."""
    import socket
    if value is None or [tuple(o) for o in value] == [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]:
        return value
    raise ConfigurationError(f"setting {name!r}: only TCP_NODELAY=1 (always set) is supported, got {value!r}")


def _kafka_python_client_only(name: str, value: Any) -> Any:
    """kafka-python's DEFAULT_CONFIG holds its client class (KafkaClient, KafkaNetClient): that default means "the
    library's own client", which kclient honours with its own; anything else is refused."""
    if value is None or (str(getattr(value, "__name__", "")).endswith("Client")
                         and str(getattr(value, "__module__", "")).startswith("kafka.")):
        return value
    raise ConfigurationError(f"setting {name!r}: kclient has its own network client; {value!r} cannot be "
                             "plugged in")


def _default_selector_only(name: str, value: Any) -> Any:
    import selectors
    if value is None or value is selectors.DefaultSelector:
        return value
    raise ConfigurationError(f"setting {name!r}: kclient uses its own selector; got {value!r}")


def _token_provider(name: str, value: Any) -> Any:
    if value is not None and not callable(getattr(value, "token", None)):
        raise ConfigurationError(f"setting {name!r} must have a token() method (kafka-python's "
                                 f"AbstractTokenProvider), got {type(value).__name__}")
    return value


def _bootstrap_validator(name: str, value: list) -> list:
    parse_bootstrap_servers(value, name)
    return value


def common_client_defs() -> list[ConfigDef]:
    """Settings every client takes (consumer, producer, admin): connections, security,
    metrics, with Kafka's documented defaults, and kafka-python's keywords for them.
    Defaults that differ from Java on purpose carry a comment."""
    return [
        ConfigDef("bootstrap.servers", "list", ["localhost:9092"], validator=_bootstrap_validator,
                  doc="host:port list used to discover the cluster (kafka-python's default localhost)"),
        ConfigDef("client.id", "str", "kclient", doc="a name sent with every request (Java: empty)"),
        ConfigDef("client.dns.lookup", "str", "use_all_dns_ips",
                  choices=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
                  doc="accepted for compatibility; kclient resolves every address a host name has "
                      "(use_all_dns_ips) whatever the value",
                  no_effect="kclient resolves every address a host name has (use_all_dns_ips)"),
        ConfigDef("request.timeout.ms", "int", 30000, min=0,
                  doc="how long a request may wait for its answer before it fails and the connection is closed"),
        ConfigDef("connections.max.idle.ms", "long", 540000, doc="connections idle for this long are closed"),
        ConfigDef("metadata.max.age.ms", "long", 300000, min=0,
                  doc="metadata is refreshed at least this often, even without errors"),
        ConfigDef("metadata.recovery.strategy", "str", "rebootstrap", choices=("none", "rebootstrap"),
                  doc="rebootstrap: when no known broker can be reached (or none answered metadata for "
                      "metadata.recovery.rebootstrap.trigger.ms, or a broker says REBOOTSTRAP_REQUIRED) "
                      "the client starts again from bootstrap.servers, so a cluster whose brokers were all "
                      "replaced behind the bootstrap address is found again; none: keep trying the known brokers"),
        ConfigDef("metadata.recovery.rebootstrap.trigger.ms", "long", 300000, min=0,
                  doc="with metadata.recovery.strategy=rebootstrap: rebootstrap after this long without "
                      "a successful metadata answer while one is wanted"),
        ConfigDef("reconnect.backoff.ms", "long", 50, min=0,
                  doc="wait before reconnecting to a broker; doubles per failure up to reconnect.backoff.max.ms"),
        ConfigDef("reconnect.backoff.max.ms", "long", 1000, min=0, doc="the largest reconnect wait"),
        ConfigDef("retry.backoff.ms", "long", 100, min=0,
                  doc="wait before retrying a failed request; doubles up to retry.backoff.max.ms"),
        ConfigDef("retry.backoff.max.ms", "long", 1000, min=0, doc="the largest retry wait"),
        ConfigDef("socket.connection.setup.timeout.ms", "long", 10000, min=0,
                  doc="how long a TCP connect may take; doubles per failure up to the max"),
        ConfigDef("socket.connection.setup.timeout.max.ms", "long", 30000, min=0,
                  doc="the largest connect timeout"),
        ConfigDef("send.buffer.bytes", "int", 131072, min=-1, doc="-1: the OS default"),
        ConfigDef("receive.buffer.bytes", "int", 65536, min=-1, doc="-1: the OS default"),
        ConfigDef("receive.thread", "bool", True,
                  doc="kclient: receive each plaintext (PLAINTEXT, SASL_PLAINTEXT) connection's "
                      "responses on a thread of its own that never takes the GIL, in parallel with "
                      "the application; false: on the thread that polls, as TLS connections always do"),
        # Not a Java consumer setting (Java hard-codes 100 for the consumer); kafka-python's
        # consumer documents it with 5, as Java's producer does.
        ConfigDef("max.in.flight.requests.per.connection", "int", 5, min=1,
                  doc="requests sent to one broker without an answer yet"),
        ConfigDef("security.protocol", "str", "PLAINTEXT",
                  validator=upper_choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
                  doc="PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)"),
        ConfigDef("sasl.mechanism", "str", "GSSAPI",
                  doc="with SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM "
                      "(Amazon MSK's IAM login, with botocore's credentials: the aws extra); GSSAPI, "
                      "the default, fails with a message: not supported"),
        ConfigDef("sasl.jaas.config", "str", None, nullable=True,
                  doc="credentials as Kafka's PlainLoginModule / ScramLoginModule entry (never logged)"),
        ConfigDef("ssl.endpoint.identification.algorithm", "str", "https",
                  doc="https: check the broker certificate's host name; empty: do not"),
        ConfigDef("ssl.truststore.type", "str", "JKS",
                  doc="PEM or PKCS12 (PKCS12 needs the cryptography package); JKS fails with how to "
                      "convert it, when a truststore location is given"),
        ConfigDef("ssl.truststore.location", "str", None, nullable=True,
                  doc="CA certificates to trust (default: the system's)"),
        ConfigDef("ssl.truststore.certificates", "str", None, nullable=True,
                  doc="CA certificates to trust, as PEM text"),
        ConfigDef("ssl.truststore.password", "str", None, nullable=True,
                  doc="password of a PKCS12 truststore (never logged)"),
        ConfigDef("ssl.keystore.type", "str", "JKS",
                  doc="PEM or PKCS12 for ssl.keystore.location (JKS fails with how to convert it)"),
        ConfigDef("ssl.keystore.location", "str", None, nullable=True,
                  doc="client key and certificate chain (mTLS)"),
        ConfigDef("ssl.keystore.key", "str", None, nullable=True,
                  doc="client private key as PEM text (with ssl.keystore.certificate.chain; never logged)"),
        ConfigDef("ssl.keystore.certificate.chain", "str", None, nullable=True,
                  doc="client certificate chain as PEM text"),
        ConfigDef("ssl.keystore.password", "str", None, nullable=True,
                  doc="password of a PKCS12 keystore (never logged)"),
        ConfigDef("ssl.key.password", "str", None, nullable=True,
                  doc="password of the client's private key (never logged)"),
        ConfigDef("metrics.num.samples", "int", 2, min=1,
                  doc="windows kept for the rates, averages and maxima of metrics()"),
        ConfigDef("metrics.sample.window.ms", "long", 30000, min=1,
                  doc="length of one metrics window (rates cover num.samples of them)"),
        ConfigDef("metrics.recording.level", "str", "INFO", validator=upper_choice("INFO", "DEBUG", "TRACE"),
                  doc="accepted for compatibility; no effect",
                  no_effect="metrics() records the same metrics at every level"),
        ConfigDef("metric.reporters", "list", [], validator=only_empty("metric reporters are not supported; "
                                                                        "read metrics() instead"),
                  doc="only empty: metric reporters are not supported (read metrics())"),
        ConfigDef("enable.metrics.push", "bool", True,
                  doc="accepted for compatibility; no effect (no KIP-714 push)",
                  no_effect="kclient does not push client metrics to the broker (KIP-714)",
                  no_effect_ok=(False,)),
        # kafka-python keywords that are not Java settings, accepted so that kafka-python code
        # runs unchanged; those marked "ignored" have no effect here.
        ConfigDef("api.version", "object", None,
                  doc="kafka-python: given, a consumer's constructor skips its bootstrap probe; request "
                      "versions are negotiated with each broker whatever the value"),
        ConfigDef("api.version.auto.timeout.ms", "int", 2000, min=0,
                  doc="how long a consumer's constructor waits for the bootstrap servers"),
        ConfigDef("bootstrap.timeout.ms", "int", 30000, min=0,
                  doc="kafka-python 3 name: if set, how long the constructor waits for the bootstrap servers"),
        ConfigDef("receive.message.max.bytes", "int", 100_000_000, min=1,
                  doc="largest response accepted from a broker (a larger length prefix fails before allocating)"),
        ConfigDef("metrics.enabled", "bool", True, doc="accepted for compatibility; no effect",
                  no_effect="metrics() is always kept"),
        ConfigDef("socket.options", "object", None, validator=_nodelay_only,
                  doc="only kafka-python's default (TCP_NODELAY on, which kclient always sets) or None"),
        ConfigDef("sock.chunk.bytes", "int", 4096, doc="ignored",
                  no_effect="kclient sizes its socket reads itself"),
        ConfigDef("sock.chunk.buffer.count", "int", 1000, doc="ignored",
                  no_effect="kclient sizes its socket reads itself"),
        ConfigDef("selector", "object", None, validator=_default_selector_only,
                  doc="only None or selectors.DefaultSelector (kafka-python's default)"),
        ConfigDef("kafka.client", "object", None, validator=_kafka_python_client_only,
                  doc="only None or kafka-python's own client class (its default): kclient has its own "
                      "network client, another cannot be plugged in"),
        ConfigDef("socks5.proxy", "str", None, nullable=True, validator=unsupported("proxies are not supported")),
        ConfigDef("proxy.url", "str", None, nullable=True, validator=unsupported("proxies are not supported")),
        # TLS/SASL in kafka-python's names.
        ConfigDef("ssl.context", "object", None,
                  doc="kafka-python: an ssl.SSLContext used as it is (the other ssl settings are then unused)"),
        ConfigDef("ssl.check.hostname", "bool", True,
                  doc="kafka-python: false skips the host name check (as an empty endpoint algorithm)"),
        ConfigDef("ssl.cafile", "str", None, nullable=True, doc="kafka-python: CA certificates to trust (PEM)"),
        ConfigDef("ssl.certfile", "str", None, nullable=True, doc="kafka-python: client certificate (PEM)"),
        ConfigDef("ssl.keyfile", "str", None, nullable=True, doc="kafka-python: client private key (PEM)"),
        ConfigDef("ssl.crlfile", "str", None, nullable=True,
                  doc="kafka-python: certificate revocation list checked for the broker's certificate"),
        ConfigDef("ssl.password", "str", None, nullable=True,
                  doc="kafka-python: password of the client's private key (never logged)"),
        ConfigDef("ssl.ciphers", "str", None, nullable=True, doc="kafka-python: allowed ciphers (OpenSSL syntax)"),
        ConfigDef("sasl.plain.username", "str", None, nullable=True,
                  doc="kafka-python: SASL user name (PLAIN and SCRAM)"),
        ConfigDef("sasl.plain.password", "str", None, nullable=True,
                  doc="kafka-python: SASL password (PLAIN and SCRAM; never logged)"),
        # GSSAPI is not implemented: its settings fail when given.
        ConfigDef("sasl.kerberos.name", "object", None,
                  validator=unsupported("GSSAPI (Kerberos) is not supported by kclient")),
        ConfigDef("sasl.kerberos.service.name", "str", "kafka",
                  doc="kafka-python: GSSAPI only, which kclient does not support (unused)"),
        ConfigDef("sasl.kerberos.domain.name", "str", None, nullable=True,
                  validator=unsupported("GSSAPI (Kerberos) is not supported by kclient")),
        ConfigDef("sasl.oauth.token.provider", "object", None, validator=_token_provider,
                  doc="kafka-python: OAUTHBEARER token source, an object with token() (and optionally "
                      "extensions()), asked once per new connection"),
        *oauth_defs(),
    ]


_LOGIN_HANDLERS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                   "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler")
_RETRIEVERS = tuple(f"org.apache.kafka.common.security.oauthbearer.{name}" for name in
                    ("DefaultJwtRetriever", "ClientCredentialsJwtRetriever", "JwtBearerJwtRetriever",
                     "FileJwtRetriever"))


def _one_of(what: str, allowed: tuple[str, ...]) -> Any:
    def check(name: str, value: Any) -> Any:
        if value is not None and value not in allowed:
            raise ConfigurationError(f"setting {name!r}: kclient has {what} built in and takes only "
                                     f"{', '.join(allowed)}; got {value!r}")
        return value
    return check


def oauth_defs() -> list[ConfigDef]:
    """OAUTHBEARER with tokens from an OAuth 2 token endpoint (OIDC), in Java's names
    (KIP-768, KIP-1139) and librdkafka's."""
    return [
        ConfigDef("sasl.oauthbearer.token.endpoint.url", "str", None, nullable=True,
                  doc="OAUTHBEARER: the OAuth 2 token endpoint (https://, http:// or a file:// holding "
                      "a token); with it kclient fetches and refreshes tokens itself"),
        ConfigDef("sasl.login.callback.handler.class", "str", None, nullable=True,
                  validator=_one_of("the OIDC login", _LOGIN_HANDLERS),
                  doc="Java: only OAuthBearerLoginCallbackHandler (the token endpoint login), which "
                      "kclient has built in"),
        ConfigDef("sasl.oauthbearer.jwt.retriever.class", "str", None, nullable=True,
                  validator=_one_of("the token retrievers", _RETRIEVERS),
                  doc="Java 4.1: ClientCredentialsJwtRetriever (the default with a token endpoint), "
                      "JwtBearerJwtRetriever (with sasl.oauthbearer.assertion.file) or FileJwtRetriever"),
        ConfigDef("sasl.oauthbearer.client.credentials.client.id", "str", None, nullable=True,
                  doc="Java 4.1: the OAuth client id (also the JAAS option clientId)"),
        ConfigDef("sasl.oauthbearer.client.credentials.client.secret", "str", None, nullable=True,
                  doc="Java 4.1: the OAuth client secret (also the JAAS option clientSecret; never logged)"),
        ConfigDef("sasl.oauthbearer.scope", "str", None, nullable=True,
                  doc="the scope asked for (also the JAAS option scope; librdkafka's name too)"),
        ConfigDef("sasl.oauthbearer.method", "str", "default", choices=("default", "oidc"),
                  doc="librdkafka: oidc fetches tokens from sasl.oauthbearer.token.endpoint.url"),
        ConfigDef("sasl.oauthbearer.client.id", "str", None, nullable=True,
                  doc="librdkafka: the OAuth client id"),
        ConfigDef("sasl.oauthbearer.client.secret", "str", None, nullable=True,
                  doc="librdkafka: the OAuth client secret (never logged)"),
        ConfigDef("sasl.oauthbearer.extensions", "str", None, nullable=True,
                  doc="librdkafka: SASL extensions sent with the token, key=value,key=value"),
        ConfigDef("sasl.oauthbearer.grant.type", "str", "client_credentials",
                  choices=("client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                  doc="librdkafka: client_credentials, or the jwt-bearer grant (RFC 7523) with "
                      "sasl.oauthbearer.assertion.file"),
        ConfigDef("sasl.oauthbearer.assertion.file", "str", None, nullable=True,
                  doc="jwt-bearer grant: a file holding the signed JWT assertion, read at each fetch "
                      "(never logged)"),
        ConfigDef("sasl.oauthbearer.assertion.private.key.file", "str", None, nullable=True,
                  doc="jwt-bearer grant: a PEM private key that signs a fresh assertion for each fetch"),
        ConfigDef("sasl.oauthbearer.assertion.private.key.pem", "str", None, nullable=True,
                  doc="librdkafka: the assertion's private key as PEM text (never logged)"),
        ConfigDef("sasl.oauthbearer.assertion.private.key.passphrase", "str", None, nullable=True,
                  doc="the passphrase of an encrypted assertion private key (never logged)"),
        ConfigDef("sasl.oauthbearer.assertion.algorithm", "str", "RS256", validator=upper_choice("RS256", "ES256"),
                  doc="RS256 (an RSA key) or ES256 (an EC P-256 key)"),
        ConfigDef("sasl.oauthbearer.assertion.claim.iss", "str", None, nullable=True,
                  doc="the assertion's issuer (iss)"),
        ConfigDef("sasl.oauthbearer.assertion.claim.sub", "str", None, nullable=True,
                  doc="the assertion's subject (sub)"),
        ConfigDef("sasl.oauthbearer.assertion.claim.aud", "str", None, nullable=True,
                  doc="the assertion's audience (aud)"),
        ConfigDef("sasl.oauthbearer.assertion.claim.exp.seconds", "int", 300, min=1,
                  doc="the assertion expires this long after it is made"),
        ConfigDef("sasl.oauthbearer.assertion.claim.nbf.seconds", "int", 60, min=0,
                  doc="the assertion is valid from this long before it is made"),
        ConfigDef("sasl.oauthbearer.assertion.claim.jti.include", "bool", False,
                  doc="give each assertion a unique id (jti)"),
        ConfigDef("sasl.oauthbearer.sub.claim.name", "str", "sub",
                  doc="the token claim that names the principal"),
        ConfigDef("sasl.oauthbearer.header.urlencode", "bool", False,
                  doc="URL-encode the client id and secret in the Basic authorization header (KIP-1025)"),
        ConfigDef("sasl.oauthbearer.ssl.truststore.location", "str", None, nullable=True,
                  doc="CA certificates (PEM file) that verify an https token endpoint (default: the system's)"),
        ConfigDef("sasl.oauthbearer.ssl.truststore.certificates", "str", None, nullable=True,
                  doc="CA certificates as PEM text that verify an https token endpoint"),
        ConfigDef("https.ca.location", "str", None, nullable=True,
                  doc="librdkafka: CA certificates (PEM file) that verify an https token endpoint"),
        ConfigDef("https.ca.pem", "str", None, nullable=True,
                  doc="librdkafka: CA certificates as PEM text that verify an https token endpoint"),
        ConfigDef("sasl.login.connect.timeout.ms", "int", 10000, min=1,
                  doc="how long connecting to the token endpoint may take (Java: unbounded)"),
        ConfigDef("sasl.login.read.timeout.ms", "int", 10000, min=1,
                  doc="how long the token endpoint may take to answer (Java: unbounded)"),
        ConfigDef("sasl.login.retry.backoff.ms", "long", 100, min=0,
                  doc="wait before fetching a token again after a failure; doubles up to the max"),
        ConfigDef("sasl.login.retry.backoff.max.ms", "long", 10000, min=0,
                  doc="the longest wait between failed token fetches"),
        ConfigDef("sasl.login.refresh.window.factor", "float", 0.8, min=0.5, max=1.0,
                  doc="a token is replaced after this part of its lifetime"),
        ConfigDef("sasl.login.refresh.window.jitter", "float", 0.05, min=0.0, max=0.25,
                  doc="up to this part of the lifetime is added at random to the refresh time"),
    ]

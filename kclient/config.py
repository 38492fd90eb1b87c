"""Client settings: Kafka's documented names, types and defaults, in one place.

Settings are given either as a dict of Java-style dotted keys (``{"bootstrap.servers": ...}``)
or as kafka-python-style keywords (``bootstrap_servers=...``); both spellings map to one
definition. Values are checked and converted once, at construction: an unknown setting or a
value of the wrong type fails with a ``ConfigurationError`` that names the setting.

kafka-python's spellings of values are accepted too: ``None`` for a setting that has a
default means that default (kafka-python code often passes its own defaults explicitly),
``None`` socket buffer sizes mean the OS default (-1), and an infinite count
(``retries=float("inf")``) the largest int.

The tables: ``common_client_defs()`` (connection, security and metrics settings every client
takes, plus kafka-python's keywords for them), the consumer's (``CONSUMER_CONFIGS``, read by
``ConsumerConfig``; ``define()`` adds to it), and the producer's and admin client's (in
their modules, built on ``common_client_defs()`` and read through ``ClientSettings``). The
validators shared by those tables live here too.
"""
from __future__ import annotations

import difflib
import enum
import importlib
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from kclient.errors import ConfigurationError

__all__ = ["ConfigDef", "ConfigRegistry", "ClientSettings", "ConsumerConfig", "CONSUMER_CONFIGS",
           "IsolationLevel", "define", "canonical_name", "common_client_defs", "parse_bootstrap_servers",
           "as_config", "callable_or_none", "plugin", "unsupported", "upper_choice", "isolation_level"]

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
DEFAULT_PORT = 9092


@dataclass(frozen=True)
class ConfigDef:
    name: str                        # dotted, as documented by Kafka
    type: str                        # "int", "long", "bool", "str", "list", "object", "float"
    default: Any = None
    doc: str = ""
    min: int | float | None = None
    max: int | float | None = None
    choices: tuple | None = None     # allowed values (after lower-casing strings)
    nullable: bool = False           # None allowed
    aliases: tuple[str, ...] = ()    # other accepted spellings (kafka-python names)
    validator: Callable[[str, Any], Any] | None = field(default=None, compare=False)
    # Accepted so that existing code runs, but kclient does not act on it: why. A value given
    # outside ``no_effect_ok`` (what kclient does anyway; the default if empty) is logged as a
    # warning, so that a setting is never silently ignored.
    no_effect: str = ""
    no_effect_ok: tuple = ()

    def ignored_value(self, value: Any) -> bool:
        """True if ``value``, given by the user, asks for something kclient does not do."""
        if not self.no_effect:
            return False
        return value not in (self.no_effect_ok or (self.default,))

    @property
    def keyword(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")


class ConfigRegistry:
    """One client's setting definitions, by dotted name and by every accepted spelling."""

    def __init__(self, defs: Iterable[ConfigDef] = (), what: str = ""):
        self.what = what                 # "producer", "admin client": named in errors
        self.defs: dict[str, ConfigDef] = {}
        self._by_spelling: dict[str, str] = {}
        for d in defs:
            self.define(d)

    def define(self, d: ConfigDef) -> ConfigDef:
        """Add (or replace) a setting definition."""
        self.defs[d.name] = d
        for spelling in (d.name, d.keyword, *d.aliases):
            self._by_spelling[spelling] = d.name
        return d

    def canonical_name(self, key: str) -> str:
        """The dotted name of a setting given in any accepted spelling."""
        name = self._by_spelling.get(key)
        if name is None:
            close = difflib.get_close_matches(str(key), list(self._by_spelling), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = f"{self.what} " if self.what else ""
            raise ConfigurationError(f"unknown {what}setting {key!r}{hint}")
        return name


# ------------------------------------------------------------------ conversions
def _to_int(name: str, value: Any, kind: str) -> int:
    if isinstance(value, bool):
        raise ConfigurationError(f"setting {name!r} must be an integer, got a bool ({value!r})")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigurationError(f"setting {name!r} must be an integer ({kind}), got {value!r}")


def _to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigurationError(f"setting {name!r} must be a boolean, got {value!r}")


def _to_list(name: str, value: Any) -> list:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigurationError(f"setting {name!r} must be a list or a comma-separated string, got {value!r}")


def _convert(d: ConfigDef, value: Any) -> Any:
    if value is None:
        if d.nullable or d.default is None:
            return None
        raise ConfigurationError(f"setting {d.name!r} may not be None")
    t = d.type
    v: Any  # the converted value; its type is the setting's
    if t in ("int", "long"):
        v = _to_int(d.name, value, t)
        hi = INT_MAX if t == "int" else LONG_MAX
        if not -hi - 1 <= v <= hi:
            raise ConfigurationError(f"setting {d.name!r}: {v} does not fit in a Java {t}")
    elif t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigurationError(f"setting {d.name!r} must be a number, got {value!r}")
        try:
            v = float(value)
        except ValueError:
            raise ConfigurationError(f"setting {d.name!r} must be a number, got {value!r}") from None
    elif t == "bool":
        v = _to_bool(d.name, value)
    elif t == "str":
        if not isinstance(value, str):
            raise ConfigurationError(f"setting {d.name!r} must be a string, got {value!r}")
        v = value
    elif t == "list":
        v = _to_list(d.name, value)
    else:  # "object": callables, classes, instances; checked by a validator if any
        v = value
    if d.min is not None and v < d.min:
        raise ConfigurationError(f"setting {d.name!r} must be at least {d.min}, got {v!r}")
    if d.max is not None and v > d.max:
        raise ConfigurationError(f"setting {d.name!r} must be at most {d.max}, got {v!r}")
    if d.choices is not None:
        key = v.lower() if isinstance(v, str) else v
        if key not in d.choices:
            raise ConfigurationError(f"setting {d.name!r} must be one of {list(d.choices)}, got {v!r}")
        v = key
    if d.validator is not None:
        v = d.validator(d.name, v)
    return v


def parse_bootstrap_servers(value: Any, name: str = "bootstrap.servers") -> list[tuple[str, int]]:
    """``"h1:9092,h2"`` / ``["h1:9092", "[::1]:9093"]`` -> ``[(host, port), ...]``.

    A missing port means 9092 (as kafka-python accepts); an empty list or a bad port fails.
    """
    items = _to_list(name, value)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigurationError(f"setting {name!r}: {item!r} is not a host:port string")
        s = item.strip()
        for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
            if s.upper().startswith(prefix):
                s = s[len(prefix):]
        if s.startswith("["):
            host, sep, rest = s[1:].partition("]")
            if not sep:
                raise ConfigurationError(f"setting {name!r}: bad address {item!r}")
            port_s = rest[1:] if rest.startswith(":") else ""
        elif s.count(":") == 1:
            host, port_s = s.split(":")
        elif ":" in s:  # bare IPv6 address without a port
            host, port_s = s, ""
        else:
            host, port_s = s, ""
        if not host:
            raise ConfigurationError(f"setting {name!r}: no host in {item!r}")
        try:
            port = int(port_s) if port_s else DEFAULT_PORT
        except ValueError:
            raise ConfigurationError(f"setting {name!r}: bad port in {item!r}") from None
        if not 0 < port < 65536:
            raise ConfigurationError(f"setting {name!r}: port out of range in {item!r}")
        out.append((host, port))
    if not out:
        raise ConfigurationError(f"setting {name!r} lists no server")
    return out



def kafka_python_value(d: ConfigDef, value: Any) -> Any:
    """kafka-python's spellings of some values (see the module doc); ``_DEFAULT`` means
    "not given"."""
    if value is None:
        if d.name in ("send.buffer.bytes", "receive.buffer.bytes"):
            return -1
        if not d.nullable and d.default is not None:
            return _DEFAULT
    if isinstance(value, float) and math.isinf(value) and value > 0 and d.type == "int":
        return INT_MAX
    return value


_DEFAULT = object()


# ------------------------------------------------------------------ validators shared by the tables
def callable_or_none(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ConfigurationError(f"setting {name!r} must be callable, got {value!r}")
    return value


def plugin(method: str, signature: str = "") -> Callable[[str, Any], Any]:
    """A validator for pluggable objects (serializers, deserializers, partitioners): None, a
    callable, an object with a ``method()`` (kafka-python's classes), or the dotted name of
    either (a class is instantiated)."""
    def check(name: str, value: Any) -> Any:
        if value is None or callable(value) or callable(getattr(value, method, None)):
            return value
        if isinstance(value, str):
            module, _, attr = value.rpartition(".")
            try:
                obj = getattr(importlib.import_module(module), attr) if module else None
            except (ImportError, AttributeError) as exc:
                raise ConfigurationError(f"setting {name!r}: cannot load {value!r}: {exc}") from None
            if isinstance(obj, type):
                obj = obj()
            if obj is not None and (callable(obj) or callable(getattr(obj, method, None))):
                return obj
        raise ConfigurationError(
            f"setting {name!r} must be a callable or have a {method}({signature}) method, got {value!r}")
    return check


def unsupported(reason: str) -> Callable[[str, Any], Any]:
    """A validator for accepted-but-unimplemented settings: only the default (None/False) passes."""
    def check(name: str, value: Any) -> Any:
        if value is not None and value is not False:
            raise ConfigurationError(f"setting {name!r}: {reason}")
        return value
    return check


def _only_empty(reason: str) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if value:
            raise ConfigurationError(f"setting {name!r}: {reason}")
        return value
    return check


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


def upper_choice(*choices: str) -> Callable[[str, Any], Any]:
    """A validator for upper-case enumerations given in any case (security.protocol)."""
    def check(name: str, value: str) -> str:
        up = value.upper()
        if up not in choices:
            raise ConfigurationError(f"setting {name!r} must be one of {list(choices)}, got {value!r}")
        return up
    return check


class IsolationLevel(enum.IntEnum):
    """kafka-python 3's names for ``isolation_level`` (strings work too)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def isolation_level(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return ("read_uncommitted", "read_committed")[value]
    if isinstance(value, str) and value.strip().lower() in ("read_uncommitted", "read_committed"):
        return value.strip().lower()
    raise ConfigurationError(
        f"setting {name!r} must be 'read_uncommitted' or 'read_committed' (or IsolationLevel), got {value!r}")


def _token_provider(name: str, value: Any) -> Any:
    if value is not None and not callable(getattr(value, "token", None)):
        raise ConfigurationError(f"setting {name!r} must have a token() method (kafka-python's "
                                 f"AbstractTokenProvider), got {type(value).__name__}")
    return value


def _bootstrap_validator(name: str, value: list) -> list:
    parse_bootstrap_servers(value, name)
    return value


# ------------------------------------------------------------------ definitions
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
                  doc="with SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (GSSAPI, the "
                      "default, fails with a message: not supported)"),
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
        ConfigDef("metric.reporters", "list", [], validator=_only_empty("metric reporters are not supported; "
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
    ]


# Names, types and defaults as documented for the Kafka consumer (Kafka 3.x/4.x).
_CONSUMER_DEFS = [
    ConfigDef("client.rack", "str", "", doc="rack of the client, for fetching from the closest replica"),
    ConfigDef("group.id", "str", None, nullable=True,
              doc="the consumer group; without it there is no membership and no committed offsets"),
    ConfigDef("group.instance.id", "str", None, nullable=True,
              doc="static membership: a restart within session.timeout.ms keeps the partitions"),
    ConfigDef("group.protocol", "str", "classic", choices=("classic", "consumer"),
              doc="the group membership protocol: classic (JoinGroup/SyncGroup, client-side assignors) "
                  "or consumer (KIP-848, Kafka 4: ConsumerGroupHeartbeat, broker-side assignors)"),
    ConfigDef("group.remote.assignor", "str", None, nullable=True,
              doc="with group.protocol=consumer: the broker-side assignor (e.g. uniform, range); "
                  "None: the broker's default"),
    ConfigDef("key.deserializer", "object", None, validator=plugin("deserialize", "topic, data"),
              doc="bytes -> object, applied to every record's key (None: bytes)"),
    ConfigDef("value.deserializer", "object", None, validator=plugin("deserialize", "topic, data"),
              doc="bytes -> object, applied to every record's value (None: bytes)"),
    ConfigDef("fetch.min.bytes", "int", 1, min=0,
              doc="the broker answers a Fetch once it has this many bytes (or fetch.max.wait.ms passed)"),
    ConfigDef("fetch.max.bytes", "int", 52428800, min=0,
              doc="the most a Fetch answer may carry (all partitions); also bounds buffered data"),
    ConfigDef("fetch.max.wait.ms", "int", 500, min=0,
              doc="how long the broker may hold a Fetch waiting for fetch.min.bytes"),
    ConfigDef("max.partition.fetch.bytes", "int", 1048576, min=0,
              doc="the most one partition contributes to a Fetch answer"),
    ConfigDef("fetch.max.in.flight.per.broker", "int", 1, min=1, max=16,
              doc="kclient: Fetch streams kept in flight to one broker, each for a fixed share of its "
                  "partitions and of fetch.max.bytes (so buffered data stays bounded the same), each "
                  "stream after the first on a connection of its own (a broker serves one request per "
                  "connection at a time); 1, as Java, because on loopback with the 64 KiB "
                  "receive.buffer.bytes 2 gained poll_columnar about 5% (medians of 5 runs, 8.9 to "
                  "9.3 M records/s), no clear change per record, and with receive.buffer.bytes=-1 "
                  "1 was fastest (README, Performance)"),
    ConfigDef("max.poll.records", "int", 500, min=1,
              doc="records one poll() returns at most, across partitions"),
    ConfigDef("max.poll.interval.ms", "int", 300000, min=1, max=2147483647,
              doc="the longest gap between poll() calls before the member leaves the group; "
                  "also JoinGroup's rebalance timeout"),
    ConfigDef("session.timeout.ms", "int", 45000, min=1, max=2147483647,
              doc="the coordinator evicts a member that has not heartbeated for this long"),
    ConfigDef("heartbeat.interval.ms", "int", 3000, min=1, max=2147483647,
              doc="must be lower than session.timeout.ms"),
    ConfigDef("enable.auto.commit", "bool", True,
              doc="commit the positions every auto.commit.interval.ms, on revocation and on close"),
    ConfigDef("auto.commit.interval.ms", "int", 5000, min=0, doc="how often positions are auto-committed"),
    ConfigDef("auto.offset.reset", "str", "latest",
              choices=("latest", "earliest", "none", "smallest", "largest"),
              doc="where to start without a committed offset or out of range: earliest, latest, or none (raise)"),
    ConfigDef("allow.auto.create.topics", "bool", True,
              doc="let Metadata requests create missing topics (if the broker allows it)"),
    ConfigDef("exclude.internal.topics", "bool", True,
              doc="keep internal topics such as __consumer_offsets out of pattern subscriptions"),
    ConfigDef("isolation.level", "object", "read_uncommitted", validator=isolation_level,
              doc="read_committed: only records of committed transactions (a string or IsolationLevel)"),
    ConfigDef("check.crcs", "bool", True, doc="verify each record batch's CRC32C"),
    ConfigDef("partition.assignment.strategy", "list", ["range", "cooperative-sticky"],
              doc="assignors in preference order (names or assignor objects)"),
    ConfigDef("interceptor.classes", "list", [],
              doc="ConsumerInterceptor instances, classes or dotted names: on_consume / on_commit"),
    ConfigDef("default.api.timeout.ms", "int", 60000, min=0,
              doc="the timeout of blocking calls given none (committed, position, offsets lookups...)"),
    # kafka-python's consumer keywords (not Java settings)
    ConfigDef("consumer.timeout.ms", "float", math.inf, min=0,
              doc="iteration stops (StopIteration) after this long without a record"),
    ConfigDef("default.offset.commit.callback", "object", None, validator=callable_or_none,
              doc="callback(offsets, exception_or_None) for commit_async() without a callback"),
    ConfigDef("enable.incremental.fetch.sessions", "bool", True,
              doc="incremental fetch sessions (KIP-227): after the first Fetch to a broker, list only "
                  "partitions whose fetch position changed; false: every Fetch lists every partition"),
    ConfigDef("legacy.iterator", "bool", False, doc="ignored",
              no_effect="kclient has one iterator (iteration polls like poll())"),
    ConfigDef("metric.group.prefix", "str", "consumer",
              doc="kafka-python: accepted for compatibility; no effect",
              no_effect="metrics() names its groups itself"),
]

_CONSUMER_REGISTRY = ConfigRegistry(common_client_defs() + _CONSUMER_DEFS)
CONSUMER_CONFIGS: dict[str, ConfigDef] = _CONSUMER_REGISTRY.defs
define = _CONSUMER_REGISTRY.define
canonical_name = _CONSUMER_REGISTRY.canonical_name

# Java silently raises a maximum below its base; so do we, but say so.
_BASE_AND_MAX = (("reconnect.backoff.ms", "reconnect.backoff.max.ms"),
                 ("retry.backoff.ms", "retry.backoff.max.ms"),
                 ("socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms"))


# ------------------------------------------------------------------ checked settings
# Settings whose values never appear in a repr, a log line or an error message.
SECRET_SETTINGS = ("ssl.key.password", "ssl.password", "ssl.keystore.password", "ssl.truststore.password",
                   "ssl.keystore.key", "sasl.jaas.config", "sasl.plain.password")


#: (setting, value) pairs already warned about: a client builds several settings objects from
#: one user's settings (the network layer's view, overrides), one warning is enough.
_warned_no_effect: set[tuple[str, str]] = set()


def _warn_no_effect(name: str, spelling: str, value: Any, why: str) -> None:
    key = (name, repr(value))
    if key in _warned_no_effect:
        return
    _warned_no_effect.add(key)
    log.warning("setting %s=%r is accepted for compatibility but has no effect: %s", spelling, value, why)


class ClientSettings(Mapping[str, Any]):
    """Checked settings of one client, from a table of definitions (a ConfigRegistry or a
    list of ConfigDef). Read with dotted keys (``cfg["request.timeout.ms"]``), keyword
    spelling (``cfg["request_timeout_ms"]``) or attributes (``cfg.request_timeout_ms``)."""

    def __init__(self, defs: ConfigRegistry | Iterable[ConfigDef], what: str = "",
                 configs: Mapping[str, Any] | None = None, kwargs: Mapping[str, Any] | None = None):
        registry = defs if isinstance(defs, ConfigRegistry) else ConfigRegistry(defs, what)
        self._registry = registry
        values: dict[str, Any] = {}
        given: dict[str, str] = {}
        for source in (configs or {}, kwargs or {}):
            if not isinstance(source, Mapping):
                raise ConfigurationError(f"settings must be a mapping, got {type(source).__name__}")
            for key, value in source.items():
                if not isinstance(key, str):
                    raise ConfigurationError(f"setting names are strings, got {key!r}")
                name = registry.canonical_name(key)
                d = registry.defs[name]
                value = kafka_python_value(d, value)
                if value is _DEFAULT:
                    continue
                converted = _convert(d, value)
                if name in values and values[name] != converted:
                    raise ConfigurationError(
                        f"setting {name!r} given twice with different values "
                        f"({given[name]}={values[name]!r}, {key}={converted!r})")
                values[name] = converted
                given[name] = key
        for name, d in registry.defs.items():
            if name not in values:
                values[name] = list(d.default) if isinstance(d.default, list) else d.default
        self._values = values
        self._given = frozenset(given)
        for name in sorted(self._given):
            d = registry.defs[name]
            if d.ignored_value(values[name]):
                _warn_no_effect(name, given[name], values[name], d.no_effect)
        for base, top in _BASE_AND_MAX:
            if base in values and top in values and values[top] < values[base]:
                log.warning("%s (%d) is below %s (%d); using %d", top, values[top], base, values[base],
                            values[base])
                values[top] = values[base]

    def __getitem__(self, key: str) -> Any:
        return self._values[self._registry.canonical_name(key)]

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self[key]
        except ConfigurationError:
            raise AttributeError(f"no setting {key!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def is_set(self, key: str) -> bool:
        """True if the user gave this setting (rather than taking the default)."""
        return self._registry.canonical_name(key) in self._given

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return parse_bootstrap_servers(self._values["bootstrap.servers"])

    def network_config(self) -> "ConsumerConfig":
        """The settings the network layer (NetworkClient, which reads a ConsumerConfig)
        understands: those this client shares with the consumer."""
        return ConsumerConfig({k: v for k, v in self._values.items() if k in CONSUMER_CONFIGS})

    def __repr__(self) -> str:
        shown = {k: self._values[k] for k in sorted(self._given)}
        for secret in SECRET_SETTINGS:
            if shown.get(secret) is not None:
                shown[secret] = "[hidden]"
        return f"{type(self).__name__}({shown!r})"


class ConsumerConfig(ClientSettings):
    """The consumer's checked settings (``CONSUMER_CONFIGS``)."""

    def __init__(self, configs: Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(_CONSUMER_REGISTRY, "", configs, kwargs)

    def with_overrides(self, **kwargs: Any) -> "ConsumerConfig":
        merged = {k: v for k, v in self._values.items() if k in self._given}
        for key, value in kwargs.items():
            merged[canonical_name(key)] = value
        return ConsumerConfig(merged)

    def network_config(self) -> "ConsumerConfig":
        return self


def as_config(config: Mapping[str, Any] | ConsumerConfig | None, **kwargs: Any) -> ConsumerConfig:
    """A ConsumerConfig from whatever the caller has (None, a dict, or one already built)."""
    if isinstance(config, ConsumerConfig):
        return config.with_overrides(**kwargs) if kwargs else config
    return ConsumerConfig(config, **kwargs)

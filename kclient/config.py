"""Consumer and common client settings: Kafka's documented names, types and defaults.

Settings are given either as a dict of Java-style dotted keys (``{"bootstrap.servers": ...}``)
or as kafka-python-style keywords (``bootstrap_servers=...``); both spellings map to one
definition. Values are checked and converted once, at construction: an unknown setting or a
value of the wrong type fails with a ``ConfigurationError`` that names the setting.

Other modules extend the registry with ``define(...)`` (e.g. kafka-python-only keywords such
as ``consumer_timeout_ms``) before building a ``ConsumerConfig``.
"""
from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from kclient.errors import ConfigurationError

__all__ = ["ConfigDef", "ConsumerConfig", "CONSUMER_CONFIGS", "define", "parse_bootstrap_servers"]

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
DEFAULT_PORT = 9092

_NO_DEFAULT = object()


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

    @property
    def keyword(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")


CONSUMER_CONFIGS: dict[str, ConfigDef] = {}
_BY_SPELLING: dict[str, str] = {}


def define(d: ConfigDef) -> ConfigDef:
    """Add (or replace) a setting definition."""
    CONSUMER_CONFIGS[d.name] = d
    for spelling in (d.name, d.keyword, *d.aliases):
        _BY_SPELLING[spelling] = d.name
    return d


def canonical_name(key: str) -> str:
    """The dotted name of a setting given in any accepted spelling."""
    name = _BY_SPELLING.get(key)
    if name is None:
        close = difflib.get_close_matches(key, list(_BY_SPELLING), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigurationError(f"unknown setting {key!r}{hint}")
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


def _bootstrap_validator(name: str, value: list) -> list:
    parse_bootstrap_servers(value, name)
    return value


def _buffer_validator(name: str, value: int) -> int:
    if value < -1:
        raise ConfigurationError(f"setting {name!r} must be -1 (OS default) or a size, got {value}")
    return value


def _callable_or_none(name: str, value: Any) -> Any:
    if value is not None and not callable(value) and not isinstance(value, str):
        raise ConfigurationError(f"setting {name!r} must be callable, got {value!r}")
    return value


# ------------------------------------------------------------------ definitions
# Names, types and defaults as documented for the Kafka consumer (Kafka 3.x/4.x).
# Defaults that differ from Java on purpose carry a comment.
for _d in [
    ConfigDef("bootstrap.servers", "list", ["localhost:9092"], validator=_bootstrap_validator,
              doc="host:port list used to discover the cluster (kafka-python's default localhost)"),
    ConfigDef("client.id", "str", "kclient", doc="a name sent with every request (Java: empty)"),
    ConfigDef("client.rack", "str", "", doc="rack of the client, for fetching from the closest replica"),
    ConfigDef("client.dns.lookup", "str", "use_all_dns_ips",
              choices=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")),
    ConfigDef("group.id", "str", None, nullable=True),
    ConfigDef("group.instance.id", "str", None, nullable=True),
    ConfigDef("group.protocol", "str", "classic", choices=("classic", "consumer")),
    ConfigDef("group.remote.assignor", "str", None, nullable=True),
    ConfigDef("key.deserializer", "object", None, validator=_callable_or_none),
    ConfigDef("value.deserializer", "object", None, validator=_callable_or_none),
    ConfigDef("fetch.min.bytes", "int", 1, min=0),
    ConfigDef("fetch.max.bytes", "int", 52428800, min=0),
    ConfigDef("fetch.max.wait.ms", "int", 500, min=0),
    ConfigDef("max.partition.fetch.bytes", "int", 1048576, min=0),
    ConfigDef("max.poll.records", "int", 500, min=1),
    ConfigDef("max.poll.interval.ms", "int", 300000, min=1),
    ConfigDef("session.timeout.ms", "int", 45000),
    ConfigDef("heartbeat.interval.ms", "int", 3000),
    ConfigDef("enable.auto.commit", "bool", True),
    ConfigDef("auto.commit.interval.ms", "int", 5000, min=0),
    ConfigDef("auto.offset.reset", "str", "latest",
              choices=("latest", "earliest", "none", "smallest", "largest")),
    ConfigDef("allow.auto.create.topics", "bool", True),
    ConfigDef("exclude.internal.topics", "bool", True),
    ConfigDef("isolation.level", "str", "read_uncommitted", choices=("read_uncommitted", "read_committed")),
    ConfigDef("check.crcs", "bool", True),
    ConfigDef("partition.assignment.strategy", "list", ["range", "cooperative-sticky"],
              doc="assignors in preference order (names or assignor objects)"),
    ConfigDef("interceptor.classes", "list", []),
    ConfigDef("default.api.timeout.ms", "int", 60000, min=0),
    ConfigDef("request.timeout.ms", "int", 30000, min=0),
    ConfigDef("connections.max.idle.ms", "long", 540000),
    ConfigDef("metadata.max.age.ms", "long", 300000, min=0),
    ConfigDef("reconnect.backoff.ms", "long", 50, min=0),
    ConfigDef("reconnect.backoff.max.ms", "long", 1000, min=0),
    ConfigDef("retry.backoff.ms", "long", 100, min=0),
    ConfigDef("retry.backoff.max.ms", "long", 1000, min=0),
    ConfigDef("socket.connection.setup.timeout.ms", "long", 10000, min=0),
    ConfigDef("socket.connection.setup.timeout.max.ms", "long", 30000, min=0),
    ConfigDef("send.buffer.bytes", "int", 131072, validator=_buffer_validator),
    ConfigDef("receive.buffer.bytes", "int", 65536, validator=_buffer_validator),
    # Not a Java consumer setting (Java hard-codes 100 for the consumer); kafka-python's
    # consumer documents it with 5.
    ConfigDef("max.in.flight.requests.per.connection", "int", 5, min=1),
    ConfigDef("security.protocol", "str", "PLAINTEXT",
              validator=lambda n, v: _choice_upper(n, v, ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
    ConfigDef("sasl.mechanism", "str", "GSSAPI"),
    ConfigDef("sasl.jaas.config", "str", None, nullable=True),
    ConfigDef("ssl.endpoint.identification.algorithm", "str", "https"),
    ConfigDef("ssl.truststore.location", "str", None, nullable=True),
    ConfigDef("ssl.keystore.location", "str", None, nullable=True),
    ConfigDef("ssl.key.password", "str", None, nullable=True),
    ConfigDef("metrics.num.samples", "int", 2, min=1),
    ConfigDef("metrics.sample.window.ms", "long", 30000, min=0),
    ConfigDef("metrics.recording.level", "str", "INFO",
              validator=lambda n, v: _choice_upper(n, v, ("INFO", "DEBUG", "TRACE"))),
    ConfigDef("metric.reporters", "list", []),
    ConfigDef("enable.metrics.push", "bool", True),
]:
    define(_d)


def _choice_upper(name: str, value: str, choices: tuple[str, ...]) -> str:
    up = value.upper()
    if up not in choices:
        raise ConfigurationError(f"setting {name!r} must be one of {list(choices)}, got {value!r}")
    return up


class ConsumerConfig(Mapping[str, Any]):
    """Checked settings. Read with dotted keys (``cfg["request.timeout.ms"]``), keyword
    spelling (``cfg["request_timeout_ms"]``) or attributes (``cfg.request_timeout_ms``)."""

    def __init__(self, configs: Mapping[str, Any] | None = None, **kwargs: Any):
        values: dict[str, Any] = {}
        given: dict[str, str] = {}
        for source in (configs or {}, kwargs):
            if not isinstance(source, Mapping):
                raise ConfigurationError(f"settings must be a mapping, got {type(source).__name__}")
            for key, value in source.items():
                if not isinstance(key, str):
                    raise ConfigurationError(f"setting names are strings, got {key!r}")
                name = canonical_name(key)
                converted = _convert(CONSUMER_CONFIGS[name], value)
                if name in values and values[name] != converted:
                    raise ConfigurationError(
                        f"setting {name!r} given twice with different values "
                        f"({given[name]}={values[name]!r}, {key}={converted!r})")
                values[name] = converted
                given[name] = key
        for name, d in CONSUMER_CONFIGS.items():
            if name not in values:
                values[name] = list(d.default) if isinstance(d.default, list) else d.default
        self._values = values
        self._given = frozenset(given)
        # Java silently raises a max below its base; we do the same but say so.
        for base, top in (("reconnect.backoff.ms", "reconnect.backoff.max.ms"),
                          ("retry.backoff.ms", "retry.backoff.max.ms"),
                          ("socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms")):
            if values[top] < values[base]:
                log.warning("%s (%d) is below %s (%d); using %d", top, values[top], base, values[base],
                            values[base])
                values[top] = values[base]

    def __getitem__(self, key: str) -> Any:
        return self._values[canonical_name(key)]

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
        return canonical_name(key) in self._given

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return parse_bootstrap_servers(self._values["bootstrap.servers"])

    def with_overrides(self, **kwargs: Any) -> "ConsumerConfig":
        merged = {k: v for k, v in self._values.items() if k in self._given}
        for key, value in kwargs.items():
            merged[canonical_name(key)] = value
        return ConsumerConfig(merged)

    def __repr__(self) -> str:
        shown = {k: self._values[k] for k in sorted(self._given)}
        for secret in ("ssl.key.password", "sasl.jaas.config"):
            if secret in shown and shown[secret] is not None:
                shown[secret] = "[hidden]"
        return f"ConsumerConfig({shown!r})"


def as_config(config: Mapping[str, Any] | ConsumerConfig | None, **kwargs: Any) -> ConsumerConfig:
    """A ConsumerConfig from whatever the caller has (None, a dict, or one already built)."""
    if isinstance(config, ConsumerConfig):
        return config.with_overrides(**kwargs) if kwargs else config
    return ConsumerConfig(config, **kwargs)



"""The table machinery every client's settings use, as in Kafka's ``ConfigDef``/``AbstractConfig``.

``ConfigDef`` is one setting's definition (Kafka's ``ConfigKey``): name, type, default, range,
other accepted spellings and doc. ``ConfigRegistry`` is one client's table of them (Kafka's
``ConfigDef``): it finds a setting by any spelling and names an unknown one with the closest
known name. ``AbstractConfig`` is a user's settings checked against a table: each value
converted once, every default filled in, read by dotted name, keyword or attribute.

Settings are given either as a dict of Java-style dotted keys (``{"bootstrap.servers": ...}``)
or as kafka-python-style keywords (``bootstrap_servers=...``); both spellings map to one
definition. An unknown setting or a value of the wrong type fails with a ``ConfigurationError``
that names the setting.

kafka-python's spellings of values are accepted too: ``None`` for a setting that has a
default means that default (kafka-python code often passes its own defaults explicitly),
``None`` socket buffer sizes mean the OS default (-1), and an infinite count
(``retries=float("inf")``) the largest int.

Tables of Python-level options (``strict``: ParallelConsumer's keyword arguments) take values
of their type as they are: no parsing of strings, and a float must be finite.
"""
from __future__ import annotations

import difflib
import importlib
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from kclient.errors import ConfigurationError

__all__ = ["ConfigDef", "ConfigRegistry", "AbstractConfig", "ClientConfig", "SECRET_SETTINGS", "parse_bootstrap_servers",
           "callable_or_none", "plugin", "unsupported", "only_empty", "upper_choice"]

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
    group: str = ""                  # a part of a table, as in Kafka's ConfigDef ("streaming")

    def ignored_value(self, value: Any) -> bool:
        """True if ``value``, given by the user, asks for something kclient does not do."""
        if not self.no_effect:
            return False
        return value not in (self.no_effect_ok or (self.default,))

    @property
    def keyword(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")


class ConfigRegistry:
    """One client's setting definitions (Kafka's ``ConfigDef``), by dotted name and by every
    accepted spelling.

    ``what`` names the client in errors ("unknown producer setting ..."); ``noun`` is what its
    entries are called ("setting", or "option" for Spark's source options); ``case_insensitive``
    tables match names in any case (Spark's options); ``strict`` tables take Python values as
    they are (see the module doc); ``unknown_hint`` ends the message of an unknown name.
    """

    def __init__(self, defs: Iterable[ConfigDef] = (), what: str = "", *, noun: str = "setting",
                 case_insensitive: bool = False, strict: bool = False, unknown_hint: str = ""):
        self.what = what
        self.noun = noun
        self.case_insensitive = case_insensitive
        self.strict = strict
        self.unknown_hint = unknown_hint
        self.defs: dict[str, ConfigDef] = {}
        self._by_spelling: dict[str, str] = {}
        for d in defs:
            self.define(d)

    def _fold(self, key: str) -> str:
        return key.lower() if self.case_insensitive else key

    def define(self, d: ConfigDef) -> ConfigDef:
        """Add (or replace) a setting definition."""
        self.defs[d.name] = d
        for spelling in (d.name, d.keyword, *d.aliases):
            self._by_spelling[self._fold(spelling)] = d.name
        return d

    def find(self, key: str) -> str | None:
        """The dotted name of a setting given in any accepted spelling, or None."""
        return self._by_spelling.get(self._fold(key))

    def canonical_name(self, key: str) -> str:
        """The dotted name of a setting given in any accepted spelling; an unknown one fails,
        naming the closest known spelling."""
        name = self.find(key)
        if name is None:
            close = difflib.get_close_matches(self._fold(str(key)), list(self._by_spelling), n=1)
            if close and self.case_insensitive:        # suggest the documented spelling
                close = [self._by_spelling[close[0]]]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = f"{self.what} " if self.what else ""
            raise ConfigurationError(f"unknown {what}{self.noun} {key!r}{hint}{self.unknown_hint}")
        return name


# ------------------------------------------------------------------ conversions
def _to_int(name: str, value: Any, kind: str, noun: str = "setting", strict: bool = False) -> int:
    if isinstance(value, bool):
        raise ConfigurationError(f"{noun} {name!r} must be an integer, got a bool ({value!r})")
    if isinstance(value, int):
        return value
    if not strict and isinstance(value, float) and value.is_integer():
        return int(value)
    if not strict and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigurationError(f"{noun} {name!r} must be an integer ({kind}), got {value!r}")


def _to_float(name: str, value: Any, noun: str = "setting", strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float) if strict else (int, float, str)):
        raise ConfigurationError(f"{noun} {name!r} must be a number, got {value!r}")
    try:
        v = float(value)
    except ValueError:
        raise ConfigurationError(f"{noun} {name!r} must be a number, got {value!r}") from None
    if math.isnan(v) or (strict and math.isinf(v)):
        raise ConfigurationError(f"{noun} {name!r} must be a finite number, got {value!r}")
    return v


def _to_bool(name: str, value: Any, noun: str = "setting", strict: bool = False) -> bool:
    if isinstance(value, bool):
        return value
    if not strict and isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigurationError(f"{noun} {name!r} must be a boolean, got {value!r}")


def _to_list(name: str, value: Any, noun: str = "setting") -> list:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigurationError(f"{noun} {name!r} must be a list or a comma-separated string, got {value!r}")


def _convert(d: ConfigDef, value: Any, noun: str = "setting", strict: bool = False) -> Any:
    if d.name in SECRET_SETTINGS:
        try:
            return _convert_value(d, value, noun, strict)
        except ConfigurationError:      # the message would show the value
            raise ConfigurationError(f"{noun} {d.name!r} must be a string (its value is not shown: "
                                     "it is secret)") from None
    return _convert_value(d, value, noun, strict)


def _convert_value(d: ConfigDef, value: Any, noun: str, strict: bool) -> Any:
    if value is None:
        if d.nullable or d.default is None:
            return None
        raise ConfigurationError(f"{noun} {d.name!r} may not be None")
    t = d.type
    v: Any  # the converted value; its type is the setting's
    if t in ("int", "long"):
        v = _to_int(d.name, value, t, noun, strict)
        hi = INT_MAX if t == "int" else LONG_MAX
        if not -hi - 1 <= v <= hi:
            raise ConfigurationError(f"{noun} {d.name!r}: {v} does not fit in a Java {t}")
    elif t == "float":
        v = _to_float(d.name, value, noun, strict)
    elif t == "bool":
        v = _to_bool(d.name, value, noun, strict)
    elif t == "str":
        if not isinstance(value, str):
            raise ConfigurationError(f"{noun} {d.name!r} must be a string, got {value!r}")
        v = value
    elif t == "list":
        v = _to_list(d.name, value, noun)
    else:  # "object": callables, classes, instances; checked by a validator if any
        v = value
    if d.min is not None and v < d.min:
        raise ConfigurationError(f"{noun} {d.name!r} must be at least {d.min}, got {v!r}")
    if d.max is not None and v > d.max:
        raise ConfigurationError(f"{noun} {d.name!r} must be at most {d.max}, got {v!r}")
    if d.choices is not None:
        key = v.lower() if isinstance(v, str) and not strict else v
        if key not in d.choices:
            raise ConfigurationError(f"{noun} {d.name!r} must be one of {list(d.choices)}, got {v!r}")
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


def only_empty(reason: str) -> Callable[[str, Any], Any]:
    """A validator for list settings kclient accepts only empty: a value fails with ``reason``."""
    def check(name: str, value: Any) -> Any:
        if value:
            raise ConfigurationError(f"setting {name!r}: {reason}")
        return value
    return check


def upper_choice(*choices: str) -> Callable[[str, Any], Any]:
    """A validator for upper-case enumerations given in any case (security.protocol)."""
    def check(name: str, value: str) -> str:
        up = value.upper()
        if up not in choices:
            raise ConfigurationError(f"setting {name!r} must be one of {list(choices)}, got {value!r}")
        return up
    return check


# Java silently raises a maximum below its base; so do we, but say so.
_BASE_AND_MAX = (("reconnect.backoff.ms", "reconnect.backoff.max.ms"),
                 ("retry.backoff.ms", "retry.backoff.max.ms"),
                 ("socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms"))


# ------------------------------------------------------------------ checked settings
# Settings whose values never appear in a repr, a log line or an error message.
SECRET_SETTINGS = ("ssl.key.password", "ssl.password", "ssl.keystore.password", "ssl.truststore.password",
                   "ssl.keystore.key", "sasl.jaas.config", "sasl.plain.password",
                   "sasl.oauthbearer.client.secret", "sasl.oauthbearer.client.credentials.client.secret",
                   "sasl.oauthbearer.assertion.private.key.pem", "sasl.oauthbearer.assertion.private.key.passphrase")


#: (setting, value) pairs already warned about: a client builds several settings objects from
#: one user's settings (the network layer's view, overrides), one warning is enough.
_warned_no_effect: set[tuple[str, str]] = set()


def _warn_no_effect(name: str, spelling: str, value: Any, why: str) -> None:
    key = (name, repr(value))
    if key in _warned_no_effect:
        return
    _warned_no_effect.add(key)
    log.warning("setting %s=%r is accepted for compatibility but has no effect: %s", spelling, value, why)


class AbstractConfig(Mapping[str, Any]):
    """A user's settings checked against one table (Kafka's ``AbstractConfig``): every value
    converted once and every default filled in. Read with dotted keys
    (``cfg["request.timeout.ms"]``), keyword spelling (``cfg["request_timeout_ms"]``) or
    attributes (``cfg.request_timeout_ms``).

    A client's own class (``ConsumerConfig``, ``ProducerConfig``, ``AdminClientConfig``) names
    its table; this class also takes a table directly (a ConfigRegistry or a list of ConfigDef).
    """

    def __init__(self, defs: ConfigRegistry | Iterable[ConfigDef], what: str = "",
                 configs: Mapping[str, Any] | None = None, kwargs: Mapping[str, Any] | None = None):
        registry = defs if isinstance(defs, ConfigRegistry) else ConfigRegistry(defs, what)
        self._registry = registry
        noun = registry.noun
        values: dict[str, Any] = {}
        given: dict[str, str] = {}
        for source in (configs or {}, kwargs or {}):
            if not isinstance(source, Mapping):
                raise ConfigurationError(f"{noun}s must be a mapping, got {type(source).__name__}")
            for key, value in source.items():
                if not isinstance(key, str):
                    raise ConfigurationError(f"{noun} names are strings, got {key!r}")
                name = registry.canonical_name(key)
                d = registry.defs[name]
                if not registry.strict:
                    value = kafka_python_value(d, value)
                    if value is _DEFAULT:
                        continue
                converted = _convert(d, value, noun, registry.strict)
                if name in values and values[name] != converted:
                    raise ConfigurationError(
                        f"{noun} {name!r} given twice with different values "
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

    def given(self) -> dict[str, Any]:
        """The settings the user gave, by dotted name (defaults left out)."""
        return {k: self._values[k] for k in self._values if k in self._given}

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

    def __repr__(self) -> str:
        shown = {k: self._values[k] for k in sorted(self._given)}
        for secret in SECRET_SETTINGS:
            if shown.get(secret) is not None:
                shown[secret] = "[hidden]"
        return f"{type(self).__name__}({shown!r})"


_C = TypeVar("_C", bound="ClientConfig")


class ClientConfig(AbstractConfig):
    """A client's checked settings: a subclass names its table (``table()``), and is built from
    a dict, keywords, or both: ``ProducerConfig({"acks": "all"}, linger_ms=5)``."""

    @classmethod
    def table(cls) -> ConfigRegistry:
        raise NotImplementedError

    def __init__(self, configs: Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(self.table(), "", configs, kwargs)

    def with_overrides(self: _C, **kwargs: Any) -> _C:
        """The same settings with some given anew (in any spelling)."""
        merged = self.given()
        for key, value in kwargs.items():
            merged[self._registry.canonical_name(key)] = value
        return type(self)(merged)

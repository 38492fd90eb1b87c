"""Serializers and deserializers in kafka-python's shapes.

Accepted wherever a ``key_serializer``/``value_deserializer``... setting is taken:
* a plain function of the bytes/object (``value_deserializer=json.loads``);
* an object with ``deserialize(topic, headers, data)`` / ``serialize(topic, headers, data)``
  (kafka-python 3 and the classes below) or ``deserialize(topic, data)`` (kafka-python 2).
``as_deserializer``/``as_serializer`` turn any of them into one ``f(topic, headers, data)``;
``close_plugins`` closes the objects when their client closes, as kafka-python 3 and Java do.
"""
from __future__ import annotations

import abc
import inspect
import json
import logging
from typing import Any, Callable

__all__ = ["Serializer", "Deserializer", "DefaultSerializer", "JsonSerializer",
           "as_deserializer", "as_serializer", "close_plugins"]

log = logging.getLogger(__name__)


class Serializer(abc.ABC):
    @abc.abstractmethod
    def serialize(self, topic: str, headers: list, data: Any) -> bytes | None:
        """The bytes to send for data (None: a null key/value)."""

    def close(self) -> None:
        pass


class Deserializer(abc.ABC):
    @abc.abstractmethod
    def deserialize(self, topic: str, headers: list, data: bytes | None) -> Any:
        """The object for a record's key/value bytes (None for a null key/value)."""

    def close(self) -> None:
        pass


class DefaultSerializer(Serializer, Deserializer):
    """str <-> bytes in one encoding (bytes pass through when serializing)."""

    def __init__(self, encoding: str = "utf-8"):
        self.encoding = encoding

    def serialize(self, topic, headers, data):
        if data is None or isinstance(data, (bytes, bytearray, memoryview)):
            return data
        return data.encode(self.encoding)

    def deserialize(self, topic, headers, data):
        return None if data is None else bytes(data).decode(self.encoding)


class JsonSerializer(DefaultSerializer):
    """JSON documents (null keys/values stay None)."""

    def serialize(self, topic, headers, data):
        return None if data is None else super().serialize(topic, headers, json.dumps(data))

    def deserialize(self, topic, headers, data):
        return None if data is None else json.loads(super().deserialize(topic, headers, data))


def _arity(method) -> int:
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 3
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _adapt(obj, method_name: str) -> Callable[[str, list, Any], Any] | None:
    if obj is None:
        return None
    method = getattr(obj, method_name, None)
    if callable(method):
        if _arity(method) >= 3:
            return method
        return lambda topic, _headers, data: method(topic, data)
    if callable(obj):
        return lambda _topic, _headers, data: obj(data)
    raise TypeError(f"{obj!r} is neither callable nor has a {method_name}() method")


def as_deserializer(obj) -> Callable[[str, list, Any], Any] | None:
    """f(topic, headers, data) for a deserializer setting (None stays None: raw bytes)."""
    return _adapt(obj, "deserialize")


def as_serializer(obj) -> Callable[[str, list, Any], Any] | None:
    return _adapt(obj, "serialize")


def close_plugins(*plugins, method: str) -> None:
    """``close()`` each object that has a ``method`` (``"deserialize"``/``"serialize"``) and a
    ``close()``: a closing client releases what its serializers hold, as kafka-python 3 and
    Java do. Plain functions have nothing to close. A failing close() is logged, not raised,
    so that the client still closes the rest."""
    for obj in plugins:
        close = getattr(obj, "close", None)
        if obj is None or not callable(getattr(obj, method, None)) or not callable(close):
            continue
        try:
            close()
        except Exception as exc:
            log.warning("closing %r failed: %s", obj, exc)

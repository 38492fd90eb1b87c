"""Consumer interceptors (``interceptor.classes``): user hooks on consumed records and commits.

As in Kafka, an interceptor's exception never reaches the application: it is logged and the
next interceptor runs (for ``on_consume``, with the records the failing one was given).
Interceptors run on the application thread: ``on_consume`` inside ``poll()`` before the
records are returned, ``on_commit`` after a commit succeeded (sync commits at once, async
commits when their completion is delivered by a later ``poll()``/commit call).
"""
from __future__ import annotations

import importlib
import logging
from typing import Any, Iterable, Mapping

from kclient.errors import ConfigurationError

__all__ = ["ConsumerInterceptor", "ConsumerInterceptors"]

log = logging.getLogger(__name__)


class ConsumerInterceptor:
    """Base class of consumer interceptors; override what you need.

    An interceptor listed in ``interceptor.classes`` as a class or a dotted name is built
    with no arguments, then ``configure(configs)`` is called with the consumer's settings.
    """

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Called once with the consumer's settings (dotted names) after construction."""

    def on_consume(self, records: Any) -> Any:
        """Called with the records ``poll()`` is about to return; return the records to pass
        on (the same object, a filtered copy, ...)."""
        return records

    def on_commit(self, offsets: Mapping) -> None:
        """Called with ``{TopicPartition: OffsetAndMetadata}`` after those offsets were committed."""

    def close(self) -> None:
        """Called when the consumer closes."""


def _load(spec: str) -> Any:
    module_name, _, attr = spec.rpartition(".")
    if not module_name:
        raise ConfigurationError(f"interceptor.classes: {spec!r} is not a dotted 'module.Class' name")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"interceptor.classes: cannot load {spec!r}: {exc}") from None


def _build_one(item: Any, configs: Mapping[str, Any] | None) -> Any:
    if isinstance(item, str):
        item = _load(item.strip())
    if isinstance(item, type):
        try:
            item = item()
        except Exception as exc:
            raise ConfigurationError(f"interceptor.classes: cannot construct {item.__name__}: {exc}") from exc
        configure = getattr(item, "configure", None)
        if callable(configure) and configs is not None:
            configure(configs)
    for method in ("on_consume", "on_commit"):
        if not callable(getattr(item, method, None)):
            raise ConfigurationError(
                f"interceptor.classes: {item!r} is not a consumer interceptor (no {method} method)")
    return item


class ConsumerInterceptors:
    """The configured interceptors, run in order; their exceptions are logged and swallowed."""

    def __init__(self, interceptors: Iterable[Any] = ()):
        self.interceptors = list(interceptors)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ConsumerInterceptors":
        """Build from ``interceptor.classes``: instances, classes or dotted class names."""
        items = config.get("interceptor.classes") or []
        return cls(_build_one(item, config) for item in items)

    def __len__(self) -> int:
        return len(self.interceptors)

    def __bool__(self) -> bool:
        return bool(self.interceptors)

    def on_consume(self, records: Any) -> Any:
        for interceptor in self.interceptors:
            try:
                records = interceptor.on_consume(records)
            except Exception:
                # Kafka's rule: a failing interceptor is skipped, the records go on unchanged.
                log.warning("interceptor %r raised in on_consume; ignored", interceptor, exc_info=True)
        return records

    def on_commit(self, offsets: Mapping) -> None:
        for interceptor in self.interceptors:
            try:
                interceptor.on_commit(offsets)
            except Exception:
                log.warning("interceptor %r raised in on_commit; ignored", interceptor, exc_info=True)

    def close(self) -> None:
        for interceptor in self.interceptors:
            close = getattr(interceptor, "close", None)
            if not callable(close):
                continue
            try:
                close()
            except Exception:
                log.warning("interceptor %r raised in close; ignored", interceptor, exc_info=True)

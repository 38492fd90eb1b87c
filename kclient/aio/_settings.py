"""aiokafka's constructor keywords, translated into kclient's settings.

Most of aiokafka's keywords are kafka-python's and pass through unchanged. The rest:

* defaults where aiokafka's differ from kclient's (session_timeout_ms 10 s, request_timeout_ms
  40 s, round-robin assignment, no cap on records per getmany), so an application that relied
  on aiokafka's defaults gets the same behaviour, and members of both clients can share a
  group while it migrates;
* keywords whose meaning differs (``consumer_timeout_ms``: aiokafka's background fetch wait,
  not kafka-python's iteration timeout; ``max_poll_records=None``: no cap);
* ``rebalance_timeout_ms``: kclient sends ``max_poll_interval_ms`` as the rebalance timeout
  (as Java does), so another value cannot be honoured and fails;
* ``api_version="auto"`` means "probe", which kclient always does.

Any other keyword goes to kclient's settings, which refuse unknown names and bad values
at construction with a message naming the setting.
"""
from __future__ import annotations

import asyncio
import inspect
import math
from typing import Any

from kclient import errors as Errors

__all__ = ["consumer_settings", "producer_settings", "UNLIMITED_RECORDS"]

#: getmany()'s cap when max_poll_records is None (aiokafka: everything prefetched).
UNLIMITED_RECORDS = 2**31 - 1

_CONSUMER_DEFAULTS: dict[str, Any] = {
    "session_timeout_ms": 10000,
    "request_timeout_ms": 40000,
}
_CLASSIC_ONLY_DEFAULTS: dict[str, Any] = {
    "partition_assignment_strategy": ("roundrobin",),
}


def _check_ms(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
        raise Errors.ConfigurationError(f"setting {name!r} must be a number of milliseconds >= 0, got {value!r}")


def consumer_settings(kwargs: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """(kclient KafkaConsumer keywords, max_poll_records or None) for aiokafka's keywords."""
    out = dict(kwargs)
    if "consumer_timeout_ms" in out:
        # aiokafka: how long its background fetcher waits before looking at rebalances and
        # new partitions again. kclient's poll reacts to both at once, so any value is met.
        _check_ms("consumer_timeout_ms", out.pop("consumer_timeout_ms"))
    rebalance = out.pop("rebalance_timeout_ms", None)
    if rebalance is not None:
        _check_ms("rebalance_timeout_ms", rebalance)
        if rebalance != out.get("max_poll_interval_ms", 300000):
            raise Errors.ConfigurationError(
                "setting 'rebalance_timeout_ms': kclient sends max_poll_interval_ms as the rebalance "
                f"timeout (as the Java client does); give max_poll_interval_ms={rebalance} instead")
    if out.get("api_version") in ("auto", None):
        out.pop("api_version", None)
    max_poll_records = out.pop("max_poll_records", None)
    if max_poll_records is not None:
        if isinstance(max_poll_records, bool) or not isinstance(max_poll_records, int) or max_poll_records < 1:
            raise Errors.ConfigurationError(f"setting 'max_poll_records' must be None or an int >= 1, "
                                            f"got {max_poll_records!r}")
        out["max_poll_records"] = max_poll_records
    for key, value in _CONSUMER_DEFAULTS.items():
        out.setdefault(key, value)
    if out.get("group_protocol", "classic") == "classic":
        for key, value in _CLASSIC_ONLY_DEFAULTS.items():
            out.setdefault(key, value)
    elif "session_timeout_ms" not in kwargs:
        out.pop("session_timeout_ms")  # the broker owns the session with group_protocol="consumer"
    return out, max_poll_records


_PRODUCER_RENAMES = {"max_batch_size": "batch_size"}


def producer_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """kclient KafkaProducer keywords for aiokafka's producer keywords."""
    out = {}
    for key, value in kwargs.items():
        out[_PRODUCER_RENAMES.get(key, key)] = value
    if out.get("api_version") in ("auto", None):
        out.pop("api_version", None)
    if out.get("client_id") is None:
        out.pop("client_id", None)
    out.setdefault("request_timeout_ms", 40000)
    return out


class LoopTokenProvider:
    """An aiokafka OAUTHBEARER token provider (``async def token()``) for kclient, which asks
    for tokens from its own threads: the coroutine runs on the application's loop."""

    def __init__(self, provider: Any, loop: asyncio.AbstractEventLoop, timeout_s: float):
        self._provider = provider
        self._loop = loop
        self._timeout_s = timeout_s

    def token(self) -> str:
        result = self._provider.token()
        if inspect.isawaitable(result):
            async def wait() -> Any:
                return await result
            return asyncio.run_coroutine_threadsafe(wait(), self._loop).result(self._timeout_s)
        return result

    def extensions(self) -> dict:
        fn = getattr(self._provider, "extensions", None)
        return fn() if callable(fn) else {}


def bind_token_provider(settings: dict[str, Any], loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    provider = settings.get("sasl_oauth_token_provider")
    if provider is None or isinstance(provider, LoopTokenProvider):
        return settings
    timeout_s = settings.get("request_timeout_ms", 40000) / 1000
    return {**settings, "sasl_oauth_token_provider": LoopTokenProvider(provider, loop, timeout_s)}

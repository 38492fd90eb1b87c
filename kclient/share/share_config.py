"""The share consumer's typed settings, built once from a user's checked consumer settings.

A share consumer takes the consumer's table (``ConsumerConfig``) for what the two have in common
(connection, ``group.id``, ``max.poll.records``, fetch sizes and wait, deserializers) and two
settings of its own, in the Java client's names: ``share.acknowledgement.mode`` (``implicit``,
the default: the records of a poll are accepted by the next poll or commit; ``explicit``: the
application acknowledges each record) and ``share.acquire.mode`` (``batch_optimized``, the
default: the broker hands out whole producer batches, so a poll may return more than
``max.poll.records``; ``record_limit``: never more than ``max.poll.records``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kclient.config import ConsumerConfig
from kclient.errors import ConfigurationError
from kclient.share.fetcher import BATCH_OPTIMIZED, RECORD_LIMIT, ShareFetchConfig

__all__ = ["ShareConsumerConfig", "split_share_settings", "IMPLICIT", "EXPLICIT"]

IMPLICIT, EXPLICIT = "implicit", "explicit"
_ACQUIRE_MODES = {"batch_optimized": BATCH_OPTIMIZED, "record_limit": RECORD_LIMIT}
#: The share consumer's own settings, with their defaults: (dotted name, keyword, default).
_SHARE_SETTINGS = (("share.acknowledgement.mode", "share_acknowledgement_mode", IMPLICIT),
                   ("share.acquire.mode", "share_acquire_mode", "batch_optimized"))


def split_share_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(the consumer settings, the share consumer's own ones by dotted name, checked)."""
    rest = dict(settings)
    own: dict[str, str] = {}
    for dotted, keyword, default in _SHARE_SETTINGS:
        given = [k for k in (dotted, keyword) if k in rest]
        if len(given) > 1:
            raise ConfigurationError(f"setting {dotted!r} given twice (as {given[0]!r} and {given[1]!r})")
        value = rest.pop(given[0]) if given else default
        own[dotted] = str(value).strip().lower()
    if own["share.acknowledgement.mode"] not in (IMPLICIT, EXPLICIT):
        raise ConfigurationError("setting 'share.acknowledgement.mode' must be 'implicit' or 'explicit', "
                                 f"got {settings.get('share.acknowledgement.mode', settings.get('share_acknowledgement_mode'))!r}")
    if own["share.acquire.mode"] not in _ACQUIRE_MODES:
        raise ConfigurationError("setting 'share.acquire.mode' must be 'batch_optimized' or 'record_limit', "
                                 f"got {settings.get('share.acquire.mode', settings.get('share_acquire_mode'))!r}")
    return rest, own


@dataclass(frozen=True)
class ShareConsumerConfig:
    group_id: str
    client_rack: str | None
    retry_backoff_ms: int
    request_timeout_ms: int
    max_poll_records: int
    explicit_acknowledgement: bool
    fetch: ShareFetchConfig
    key_deserializer: Any
    value_deserializer: Any

    @classmethod
    def of(cls, config: ConsumerConfig, own: Mapping[str, str]) -> "ShareConsumerConfig":
        group_id = config["group.id"]
        if not group_id:
            raise ConfigurationError("a share consumer needs 'group.id' (group_id): the share group it joins")
        max_records = config["max.poll.records"]
        fetch = ShareFetchConfig(max_wait_ms=config["fetch.max.wait.ms"], min_bytes=config["fetch.min.bytes"],
                                 max_bytes=config["fetch.max.bytes"], max_records=max_records,
                                 batch_size=max_records, acquire_mode=_ACQUIRE_MODES[own["share.acquire.mode"]],
                                 check_crcs=config["check.crcs"], retry_backoff_ms=config["retry.backoff.ms"])
        return cls(group_id=group_id, client_rack=config["client.rack"] or None,
                   retry_backoff_ms=config["retry.backoff.ms"], request_timeout_ms=config["request.timeout.ms"],
                   max_poll_records=max_records,
                   explicit_acknowledgement=own["share.acknowledgement.mode"] == EXPLICIT, fetch=fetch,
                   key_deserializer=config["key.deserializer"], value_deserializer=config["value.deserializer"])

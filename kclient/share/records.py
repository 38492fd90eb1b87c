"""The record a share consumer returns: a consumer record plus its delivery count."""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

from kcore.sharerecords import share_record_type

__all__ = ["ShareConsumerRecord"]

ShareConsumerRecord = namedtuple(
    "ShareConsumerRecord",
    [
        "topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type",
        "key", "value", "headers", "checksum",
        "serialized_key_size", "serialized_value_size", "serialized_header_size",
        "delivery_count",
    ],
)
ShareConsumerRecord.__doc__ = """One record returned by a share consumer's ``poll()``: the fields of
``ConsumerRecord`` and ``delivery_count``, how many times the broker has handed this record out
(1 on its first delivery; a released record or one whose lock ran out comes back one higher)."""

# The same namedtuple, compiled (kcore.sharerecords.share_record_type): fields read like
# instance slots, and a poll's records reuse the memory of the previous poll's. Everything a
# namedtuple offers is unchanged. (Type checkers see the namedtuple.)
if not TYPE_CHECKING:
    ShareConsumerRecord = share_record_type(ShareConsumerRecord)

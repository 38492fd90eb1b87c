"""What ``KafkaConsumer`` asks of its group coordinator, whichever group protocol it speaks.

``ConsumerCoordinator`` (``group.protocol=classic``) and ``ConsumerGroupCoordinator``
(``group.protocol=consumer``, KIP-848) both provide it; the consumer builds one of them once
and talks to it only through these methods, and commits through its ``committer`` (the
``OffsetCommitter`` both protocols share).
"""
from __future__ import annotations

from typing import Protocol

from kcore.timers import Heartbeat

from kclient.group.commit_manager import OffsetCommitter
from kclient.network.future import RequestFuture

__all__ = ["MemberCoordinator"]


class MemberCoordinator(Protocol):
    heartbeat: Heartbeat
    committer: OffsetCommitter

    def poll(self, timeout_ms: int | None) -> bool:
        """Coordinator work of one consumer poll; False if it could not finish in time."""

    def record_poll(self, now_ms: int) -> None:
        """The application called poll(): restart the max.poll.interval.ms clock."""

    def time_to_next_poll(self, now_ms: int) -> int:
        """ms until poll() must run again for the coordinator (auto-commit, heartbeat)."""

    def rejoin_needed_or_pending(self) -> bool: ...

    def on_leave_prepare(self) -> None:
        """Before leaving (unsubscribe, close): revoke the partitions owned."""

    def maybe_leave_group(self, reason: str) -> RequestFuture | None: ...

    def close(self, timeout_ms: int | None = None, autocommit: bool = True) -> None: ...

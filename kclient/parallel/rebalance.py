"""The rebalance listener ParallelConsumer installs on the KafkaConsumer.

It runs on the polling thread, inside ``poll()`` (kclient calls listeners there), so it may
commit. It lets the ParallelConsumer settle a partition's work first (wait for its running
records, commit its completed prefix, drop its queue) and then calls the application's own
listener, if one was given, so that listener sees the partition's final committed offset.
"""
from __future__ import annotations

from collections.abc import Collection

from kclient import ConsumerRebalanceListener

__all__ = ["RebalanceHook", "check_listener"]


def check_listener(listener) -> None:
    if listener is None:
        return
    for method in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, method, None)):
            raise TypeError(f"listener must be a ConsumerRebalanceListener (it has no {method}); "
                            f"got {type(listener).__name__}")


class RebalanceHook(ConsumerRebalanceListener):
    """Forwards the group's callbacks to the owner first, then to the user's listener."""

    def __init__(self, owner, user_listener=None):
        check_listener(user_listener)
        self._owner = owner
        self.user_listener = user_listener

    def on_partitions_revoked(self, revoked: Collection) -> None:
        self._owner._on_revoked(set(revoked))
        if self.user_listener is not None:
            self.user_listener.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: Collection) -> None:
        self._owner._on_assigned(set(assigned))
        if self.user_listener is not None:
            self.user_listener.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: Collection) -> None:
        self._owner._on_lost(set(lost))
        user = self.user_listener
        if user is not None:
            # Kafka's rule: a listener without on_partitions_lost hears of them as revoked.
            handler = getattr(user, "on_partitions_lost", None)
            if callable(handler):
                handler(lost)
            else:
                user.on_partitions_revoked(lost)

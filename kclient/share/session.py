"""A share session with one broker (KIP-932): its epoch and the partitions it holds.

The first ShareFetch to a broker opens a session (epoch 0) naming every partition to fetch.
Each later request (ShareFetch or ShareAcknowledge) carries the next epoch (1, 2, ..., wrapping
from 2**31-1 to 1), names only the partitions new to the session or with acknowledgements, and
lists in ``forgotten_topics_data`` the partitions to drop. Epoch -1 closes the session: the
broker releases every record acquired through it and not acknowledged. A broker that lost the
session answers SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH: the client opens a new
one (its records acquired through the old one come back when their locks run out).

One request at a time per session: the epochs must arrive in order.
"""
from __future__ import annotations

import logging
from typing import AbstractSet, Any, Iterable

__all__ = ["ShareSession", "INITIAL_EPOCH", "FINAL_EPOCH", "next_epoch"]

log = logging.getLogger(__name__)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

#: Partition key inside a session: (topic_id, partition).
Key = tuple[Any, int]
_NONE: frozenset = frozenset()


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class ShareSession:
    def __init__(self, node_id: int):
        self.node_id = node_id
        self.epoch = INITIAL_EPOCH
        #: Partitions the broker holds in this session.
        self.partitions: set[Key] = set()
        #: Bumped by every reset: the acknowledgements of records acquired through an earlier
        #: generation can no longer be sent (a new session's first request carries none).
        self.generation = 0
        self._pending: tuple[AbstractSet[Key], AbstractSet[Key]] | None = None
        #: The collection of partitions last planned that changed nothing (the same object is
        #: planned every request while the assignment and the metadata stay as they are).
        self._unchanged: object = None

    @property
    def is_open(self) -> bool:
        """The broker knows this session (a request with epoch 0 was answered)."""
        return self.epoch > 0

    def plan(self, wanted: Iterable[Key]) -> tuple[int, AbstractSet[Key], AbstractSet[Key]]:
        """The epoch to send, the partitions to add and those to forget for a fetch of
        ``wanted``; ``answered`` or ``reset`` applies it. The same ``wanted`` object as a plan
        that changed nothing, at an open session, changes nothing again (not worked out anew
        every request)."""
        if wanted is self._unchanged and self.epoch != INITIAL_EPOCH:
            self._pending = None
            return self.epoch, _NONE, _NONE
        want = set(wanted)
        if self.epoch == INITIAL_EPOCH:
            added, forgotten = want, set()
        else:
            added, forgotten = want - self.partitions, self.partitions - want
        self._pending = (added, forgotten)
        self._unchanged = wanted if self.epoch != INITIAL_EPOCH and not added and not forgotten else None
        return self.epoch, added, forgotten

    def plan_acknowledge(self) -> int:
        """The epoch of a ShareAcknowledge (the session's partitions stay as they are)."""
        self._pending = None
        return self.epoch

    def answered(self) -> None:
        """The broker accepted the request: the session moves to the next epoch."""
        pending = self._pending
        if pending is not None:
            added, forgotten = pending
            self._pending = None
            if added or forgotten:
                self.partitions = (self.partitions | added) - forgotten
                self._unchanged = None
        self.epoch = next_epoch(self.epoch)

    def reset(self, why: str) -> None:
        """The broker does not know this session (or the request failed): start over."""
        if self.epoch != INITIAL_EPOCH:
            log.info("share session with node %d at epoch %d is reset: %s", self.node_id, self.epoch, why)
        self._pending = None
        self._unchanged = None
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self.generation += 1

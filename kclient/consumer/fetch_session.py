"""Incremental fetch sessions (KIP-227): one ``FetchSessionHandler`` per fetch stream to a broker.

A session lets a Fetch list only what changed since the last one. The broker keeps, per
session, the partitions and their fetch parameters; the client then sends:

* a full request (``session_id`` 0 or the old id, ``session_epoch`` 0): every partition; the
  broker answers with the id of a new session (or 0 if it keeps none: the next request is
  full again);
* incremental requests (the session's id, epochs 1, 2, ... wrapping to 1): the partitions
  added or whose parameters changed (fetch offset, leader epochs, max bytes) and, as
  "forgotten", those removed; the answer carries only partitions with news (records, a
  moved high watermark / log start / last stable offset, an error).

Errors: FETCH_SESSION_ID_NOT_FOUND and INVALID_FETCH_SESSION_EPOCH (the broker evicted the
session, or an answer was lost) start over with a new session; any other failure of a request
(connection lost, timeout) sends the next one full with the old id and epoch 0, which closes
the old session on the broker and opens a new one. Sessionless fetching (``session_epoch``
-1 every time) is used when ``enable.incremental.fetch.sessions`` is false or the broker's
Fetch is older than v7.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

from kclient.structs import TopicPartition

__all__ = ["FetchSessionHandler", "FetchPartition", "FetchRequestData", "INITIAL_EPOCH", "FINAL_EPOCH",
           "SESSION_VERSION"]

log = logging.getLogger(__name__)

INITIAL_EPOCH = 0         # a full request that opens a session (closing the given one, if any)
FINAL_EPOCH = -1          # a full request without a session (or closing the given one)
SESSION_VERSION = 7       # first Fetch version with sessions
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
SESSION_ERRORS = frozenset({FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR})
_MAX_EPOCH = 2**31 - 1


class FetchPartition(NamedTuple):
    """What a Fetch asks of one partition; a change of any field must be sent again."""
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int


class FetchRequestData(NamedTuple):
    session_id: int
    session_epoch: int
    to_send: dict[TopicPartition, FetchPartition]     # partitions listed in the request
    forgotten: list[TopicPartition]                    # partitions the session drops
    session: dict[TopicPartition, FetchPartition]     # every partition this fetch covers

    @property
    def is_full(self) -> bool:
        return self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class FetchSessionHandler:
    """The client's half of one fetch session with one broker (see the module docstring)."""

    __slots__ = ("node_id", "session_id", "epoch", "partitions", "version", "_enabled", "_pending",
                 "sessions_created", "incremental_requests")

    def __init__(self, node_id: int, enabled: bool = True):
        self.node_id = node_id
        self.session_id = 0
        self.epoch = INITIAL_EPOCH if enabled else FINAL_EPOCH
        self.partitions: dict[TopicPartition, FetchPartition] = {}   # as the broker has them
        self.version: int | None = None    # Fetch version of the session's requests
        self._enabled = enabled
        self._pending: FetchRequestData | None = None
        self.sessions_created = 0
        self.incremental_requests = 0

    def build(self, wanted: dict[TopicPartition, FetchPartition], version: int) -> FetchRequestData:
        """The next request for ``wanted`` (every partition this fetch should cover)."""
        if not self._enabled or version < SESSION_VERSION:
            data = FetchRequestData(0, FINAL_EPOCH, wanted, [], wanted)
        elif self.session_id == 0 or self.epoch == INITIAL_EPOCH:
            data = FetchRequestData(self.session_id, INITIAL_EPOCH, wanted, [], wanted)
        else:
            known = self.partitions
            to_send = {tp: p for tp, p in wanted.items() if known.get(tp) != p}
            forgotten = [tp for tp in known if tp not in wanted]
            data = FetchRequestData(self.session_id, self.epoch, to_send, forgotten, wanted)
            self.incremental_requests += 1
        self._pending = data
        return data

    def incremental(self, version: int) -> bool:
        """The next request in ``version`` is incremental: it may list only what changed."""
        return (self._enabled and self.session_id != 0 and self.epoch != INITIAL_EPOCH
                and self.version == version and version >= SESSION_VERSION)

    def build_changes(self, changed: dict[TopicPartition, FetchPartition]) -> FetchRequestData:
        """The next incremental request (``incremental`` is true) when the fetch covers the
        same partitions as the last one and only those of ``changed`` may have new
        parameters: its cost follows ``changed``, not the session. The session's partitions
        take the changes at once (every outcome of the request replaces them: the answer
        confirms them, an error empties them)."""
        known = self.partitions
        to_send: dict[TopicPartition, FetchPartition] = {}
        for tp, p in changed.items():
            if known.get(tp) != p:
                known[tp] = to_send[tp] = p
        data = self._pending = FetchRequestData(self.session_id, self.epoch, to_send, [], known)
        self.incremental_requests += 1
        return data

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """The answer to the last built request arrived. False if it is a session error: its
        partitions carry nothing, and the next request starts a new session."""
        data, self._pending = self._pending, None
        if error_code in SESSION_ERRORS:
            log.info("fetch session %d with node %d: error %d; starting a new session",
                     self.session_id, self.node_id, error_code)
            self.session_id, self.epoch, self.partitions = 0, INITIAL_EPOCH, {}
            return False
        if error_code:
            self._close_existing()
            return True
        if data is None or data.session_epoch == FINAL_EPOCH:
            return True
        if data.session_epoch == INITIAL_EPOCH:
            if session_id == 0:
                # The broker keeps no session (cache full, or it does not do sessions): the
                # next request is full again.
                self.session_id, self.epoch, self.partitions = 0, INITIAL_EPOCH, {}
                return True
            if session_id != self.session_id:
                self.sessions_created += 1
                log.debug("fetch session %d opened with node %d (%d partitions)", session_id, self.node_id,
                          len(data.session))
            self.session_id = session_id
        if data.session is not self.partitions:    # build_changes updated them in place
            self.partitions = dict(data.session)
        self.epoch = next_epoch(data.session_epoch)
        return True

    def handle_error(self) -> None:
        """The last request failed without an answer (connection lost, timeout, cancelled)."""
        self._pending = None
        self._close_existing()

    def _close_existing(self) -> None:
        # Full with the old id and epoch 0: the broker closes that session and opens another.
        if self._enabled:
            self.epoch = INITIAL_EPOCH
            self.partitions = {}
            self.version = None

    def __repr__(self) -> str:
        return (f"FetchSessionHandler(node={self.node_id}, session_id={self.session_id}, epoch={self.epoch}, "
                f"partitions={len(self.partitions)})")

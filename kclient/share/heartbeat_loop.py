"""A share member's Python heartbeat thread (a ``HeartbeatDriver`` of the group layer).

It keeps the member's ShareGroupHeartbeats going between the application's polls. Like the
KIP-848 loop it never waits for the network client's lock: it reads answers with
``poll_network_nowait`` (nothing if the application thread is polling; that poll reads them)
and otherwise sleeps on the coordinator's condition until the next heartbeat is due.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from kclient import errors as Errors
from kclient.network.future import RequestFuture
from kclient.share.membership import HEARTBEATING, ShareMembership

__all__ = ["ShareHeartbeatLoop", "ShareLoopHost"]

log = logging.getLogger(__name__)

#: Longest single network poll of the heartbeat thread (it must not hold the client's lock long).
NETWORK_WAIT_MAX_MS = 50


class ShareLoopHost(Protocol):
    """What the loop needs of the share coordinator it keeps alive."""

    group_id: str
    membership: ShareMembership

    @property
    def lock(self) -> Any: ...

    @property
    def cond(self) -> threading.Condition: ...

    @property
    def closed(self) -> bool: ...

    def now_ms(self) -> int: ...

    def coordinator_unknown(self) -> bool: ...

    def lookup_coordinator(self) -> RequestFuture: ...

    def heartbeat_tick(self, now_ms: int) -> int: ...

    def heartbeat_in_flight(self) -> bool: ...

    def has_pending_coordinator_requests(self) -> bool: ...

    def poll_network_nowait(self, timeout_ms: int) -> bool: ...

    def wake_network(self) -> None: ...

    def on_heartbeat_loop_failure(self, exc: BaseException) -> None: ...


class ShareHeartbeatLoop(threading.Thread):
    def __init__(self, coordinator: ShareLoopHost):
        super().__init__(name=f"kclient-share-heartbeat-{coordinator.group_id}", daemon=True)
        self._c = coordinator
        self._stopped = False

    # ------------------------------------------------------------------ HeartbeatDriver
    @property
    def engaged(self) -> bool:
        return False

    @property
    def failure(self) -> BaseException | None:
        """Never set: a failure of the loop becomes the membership's fatal error."""
        return None

    def enable(self) -> None:
        """The loop follows the membership's state: nothing to switch on."""

    def disable(self) -> None:
        """The loop follows the membership's state: nothing to switch off."""

    def membership_changed(self) -> None:
        """Nothing to push: each iteration reads the membership."""

    def drain(self) -> None:
        """Nothing to apply: the loop acts on the coordinator itself."""

    def disengage(self) -> None:
        """Python heartbeats already."""

    def restarted(self) -> "ShareHeartbeatLoop":
        return self

    def wake(self) -> None:
        with self._c.lock:
            self._c.cond.notify_all()

    def close(self, timeout_s: float | None = None) -> None:
        with self._c.lock:
            self._stopped = True
            self._c.cond.notify_all()
        self._c.wake_network()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout_s)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        c = self._c
        try:
            while True:
                with c.lock:
                    if self._stopped or c.closed:
                        return
                    if c.coordinator_unknown() and c.membership.state in HEARTBEATING:
                        c.lookup_coordinator()
                wait = c.heartbeat_tick(c.now_ms())
                with c.lock:
                    pending = c.heartbeat_in_flight() or c.has_pending_coordinator_requests()
                if pending:
                    if not c.poll_network_nowait(min(max(wait, 1), NETWORK_WAIT_MAX_MS)):
                        with c.lock:
                            if not self._stopped:
                                c.cond.wait(NETWORK_WAIT_MAX_MS / 1000.0)
                else:
                    with c.lock:
                        if not self._stopped:
                            c.cond.wait(max(wait, 1) / 1000.0)
        except BaseException as exc:   # the next poll() raises it
            log.error("share heartbeat thread of group %s failed: %r", c.group_id, exc,
                      exc_info=not isinstance(exc, Errors.KafkaError))
            c.on_heartbeat_loop_failure(exc)

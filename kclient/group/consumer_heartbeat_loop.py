"""The Python heartbeat thread of a broker-driven membership (a ``HeartbeatDriver``): the
KIP-848 consumer member's, and the share member's (KIP-932), whose heartbeats follow the same
rules (the broker sets the interval; the member heartbeats while in a heartbeating state).

It keeps the member's heartbeats going between the application's polls. It
never waits for the network client's lock: it reads responses with ``try_poll_no_wakeup``
(nothing if the application thread is polling; then that poll reads them) and otherwise
sleeps on the coordinator's condition until the next heartbeat. Carried by a pacemaker link
(``pacemaker``), it parks without the GIL while the pacemaker heartbeats.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from kclient import errors as Errors
from kclient.group.consumer_membership import HEARTBEATING
from kclient.group.heartbeat_driver import GilFreeSender
from kclient.network.future import RequestFuture

__all__ = ["ConsumerHeartbeatLoop", "ConsumerLoopHost", "MemberState", "NETWORK_WAIT_MAX_MS",
           "PACEMAKER_WAIT_MAX_MS"]

log = logging.getLogger(__name__)

#: Longest single network poll of the heartbeat thread (it must not hold the client's lock long).
NETWORK_WAIT_MAX_MS = 50
#: Longest wait of the heartbeat thread for pacemaker events (bounds how late it notices its own work).
PACEMAKER_WAIT_MAX_MS = 500


class MemberState(Protocol):
    """What the loop reads of a membership: its state."""

    @property
    def state(self) -> Any: ...


class ConsumerLoopHost(Protocol):
    """What the loop needs of the coordinator it keeps alive (KIP-848 or share)."""

    @property
    def group_id(self) -> str | None: ...

    @property
    def membership(self) -> MemberState: ...

    @property
    def lock(self) -> Any: ...

    @property
    def cond(self) -> threading.Condition: ...

    @property
    def closed(self) -> bool: ...

    def now_ms(self) -> int: ...

    def coordinator_unknown(self) -> bool: ...

    def lookup_coordinator(self) -> RequestFuture: ...

    def heartbeat_tick(self, now_ms: int) -> int:
        """Send a heartbeat if one is due; ms until the next one is."""

    def heartbeat_in_flight(self) -> bool: ...

    def has_pending_coordinator_requests(self) -> bool: ...

    def poll_network_nowait(self, timeout_ms: int) -> bool: ...

    def wake_network(self) -> None: ...

    def on_heartbeat_loop_failure(self, exc: BaseException) -> None:
        """The loop ended on an unexpected error (the next poll raises it)."""


class ConsumerHeartbeatLoop(threading.Thread):
    """``heartbeating``: the membership states in which the member heartbeats (and so looks
    its coordinator up when it is unknown); the KIP-848 member's by default."""

    def __init__(self, coordinator: ConsumerLoopHost, pacemaker: GilFreeSender | None = None, *,
                 heartbeating: frozenset | set = HEARTBEATING, name: str | None = None):
        super().__init__(name=name or f"kclient-heartbeat-{coordinator.group_id}", daemon=True)
        self._c = coordinator
        self._pacemaker = pacemaker
        self._heartbeating = heartbeating
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

    def restarted(self) -> "ConsumerHeartbeatLoop":
        return self

    def wake(self) -> None:
        with self._c.lock:
            self._c.cond.notify_all()

    def stop(self) -> None:
        with self._c.lock:
            self._stopped = True
            self._c.cond.notify_all()
        if self._pacemaker is not None:
            self._pacemaker.wake()
        self._c.wake_network()

    def close(self, timeout_s: float | None = None) -> None:
        self.stop()
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
                    if c.coordinator_unknown() and c.membership.state in self._heartbeating:
                        c.lookup_coordinator()
                wait = c.heartbeat_tick(c.now_ms())
                with c.lock:
                    pending = c.heartbeat_in_flight() or c.has_pending_coordinator_requests()
                    link = self._pacemaker
                    engaged = link is not None and link.engaged
                if engaged and not pending:
                    # Parked without the GIL until the pacemaker has news (or a short while,
                    # to notice this thread's own work).
                    assert link is not None
                    link.wait_and_drain(min(max(wait, 1), PACEMAKER_WAIT_MAX_MS))
                elif pending:
                    if not c.poll_network_nowait(min(max(wait, 1), NETWORK_WAIT_MAX_MS)):
                        with c.lock:
                            if not self._stopped:
                                c.cond.wait(NETWORK_WAIT_MAX_MS / 1000.0)
                else:
                    with c.lock:
                        if not self._stopped:
                            c.cond.wait(max(wait, 1) / 1000.0)
        except BaseException as exc:   # the next poll() raises it
            log.error("%s of group %s failed: %r", self.name, c.group_id, exc,
                      exc_info=not isinstance(exc, Errors.KafkaError))
            c.on_heartbeat_loop_failure(exc)

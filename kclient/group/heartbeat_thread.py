"""The background thread that keeps a group member alive (mechanisms §1, §2).

One iteration of the loop is ``HeartbeatThread.run_once()``, which runs holding the
coordinator's lock and returns what to do next (exit, wait for an event, or wait N ms), so
unit tests drive it step by step with a fake clock. ``run()`` repeats it and does the waiting.

Waiting. The thread waits on the coordinator's condition until the earliest of: next
heartbeat due, session expiry, poll expiry (``Heartbeat.next_wakeup_ms``). ``enable()``,
``close()`` and a failed heartbeat notify the condition so it wakes early. While one of the
coordinator's requests (a heartbeat, a FindCoordinator, a LeaveGroup) is in flight someone
must read its response: if the application thread is not polling the network, this thread
does it itself with a short ``try_poll_no_wakeup`` (at most ``NETWORK_WAIT_MAX_MS``) instead of
sleeping on the condition.

Sharing the network client. ``ConsumerNetworkClient`` holds its poll lock while a poll waits
in select(). This thread never waits for that lock: it polls with ``try_poll_no_wakeup``,
which does nothing if another thread is polling. When the application thread is blocked in
a long poll, a request this thread sends wakes that select() (``ConsumerNetworkClient.send``
does so while a poll is running), the application thread's poll transmits it and reads the
response, and the response handler runs there. So a long application poll never delays a
heartbeat, and this thread never blocks the application thread for more than one short poll.
(``least_loaded_node``, ``is_unavailable`` and ``try_connect``, used for coordinator lookups,
do not wait for that lock either.)

The GIL. Python code in the application thread gives up the GIL every switch interval
(5 ms), so this thread keeps heartbeating while the application computes in pure Python
for longer than session.timeout.ms. A C extension call that holds the GIL for longer than
the session timeout cannot be survived by a Python thread: where it can, the coordinator's
driver is the pacemaker link (kclient.group.pacemaker), which carries this thread and
heartbeats without the GIL; this thread then waits for the pacemaker's events.

The thread talks to its coordinator through ``ClassicHeartbeatHost`` only.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from kcore.timers import Heartbeat

from kclient import errors as Errors
from kclient.group.heartbeat_driver import GilFreeSender
from kclient.network.future import RequestFuture

__all__ = ["HeartbeatThread", "ClassicHeartbeatHost", "EXIT", "WAIT_FOR_EVENT", "WAIT_FOR_PACEMAKER", "NETWORK_WAIT_MAX_MS",
           "PACEMAKER_WAIT_MAX_MS"]

log = logging.getLogger(__name__)

#: run_once() results other than a wait in ms (>= 0)
EXIT = -1
WAIT_FOR_EVENT = -2
#: the GIL-free pacemaker heartbeats: wait for its events (kclient.group.pacemaker)
WAIT_FOR_PACEMAKER = -3

#: Longest wait for pacemaker events: bounds how late this thread notices its own work
#: (close, a coordinator lookup) if no event and no wake() arrives.
PACEMAKER_WAIT_MAX_MS = 1000

#: Longest single network poll of this thread: bounds how long the application thread can wait
#: for the network client's lock while this thread reads a response.
NETWORK_WAIT_MAX_MS = 50

# Errors that end the thread: they will not go away by retrying (mechanisms §2 step 8).
_FATAL = (Errors.FencedInstanceIdError, Errors.GroupAuthorizationFailedError,
          Errors.SaslAuthenticationFailedError, Errors.UnsupportedVersionError)


class ClassicHeartbeatHost(Protocol):
    """What the heartbeat thread needs of the classic coordinator it keeps alive."""

    group_id: str | None
    heartbeat: Heartbeat

    @property
    def lock(self) -> Any:
        """The coordinator's lock (re-entrant); the thread's state lives under it too."""

    @property
    def cond(self) -> threading.Condition:
        """The condition of ``lock`` the thread waits on."""

    def now_ms(self) -> int: ...

    def heartbeats_wanted(self) -> bool: ...

    def poll_network_nowait(self, timeout_ms: int) -> bool: ...

    def wake_network(self) -> None: ...

    def coordinator_unknown(self) -> bool: ...

    def lookup_in_flight(self) -> bool: ...

    def lookup_coordinator(self) -> RequestFuture: ...

    def has_pending_coordinator_requests(self) -> bool: ...

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False, node: Any = None) -> None: ...

    def on_poll_timeout(self, now_ms: int) -> None: ...

    def send_heartbeat_request(self) -> RequestFuture: ...


class HeartbeatThread(threading.Thread):
    """The classic member's Python heartbeat driver (a ``HeartbeatDriver``); with a pacemaker
    link (``pacemaker``) it applies the pacemaker's events instead of heartbeating while the
    pacemaker is engaged."""

    def __init__(self, coordinator: ClassicHeartbeatHost, pacemaker: GilFreeSender | None = None):
        name = f"kclient-heartbeat-{coordinator.group_id}"
        super().__init__(name=name, daemon=True)
        self._coordinator = coordinator
        self._pacemaker = pacemaker
        self._lock = coordinator.lock
        self._cond = coordinator.cond
        self._enabled = False
        self._closed = False
        self._failure: BaseException | None = None

    # ------------------------------------------------------------------ control (any thread)
    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def host(self) -> ClassicHeartbeatHost:
        """The coordinator this thread keeps alive."""
        return self._coordinator

    @property
    def failure(self) -> BaseException | None:
        """The error that ended the thread (re-raised by the application's next poll)."""
        return self._failure

    @property
    def engaged(self) -> bool:
        return False

    def enable(self) -> None:
        with self._lock:
            log.debug("enabling heartbeat thread of group %s", self._coordinator.group_id)
            self._enabled = True
            # A member that just became STABLE starts a fresh session and poll interval.
            self._coordinator.heartbeat.reset_timeouts(self._coordinator.now_ms())
            self._cond.notify_all()

    def disable(self) -> None:
        with self._lock:
            if self._enabled:
                log.debug("disabling heartbeat thread of group %s", self._coordinator.group_id)
            self._enabled = False

    def membership_changed(self) -> None:
        """Nothing to push: each iteration reads the membership."""

    def drain(self) -> None:
        """Nothing to apply: the thread acts on the coordinator itself."""

    def disengage(self) -> None:
        """Python heartbeats already."""

    def wake(self) -> None:
        with self._lock:
            self._cond.notify_all()

    def restarted(self) -> "HeartbeatThread":
        return HeartbeatThread(self._coordinator, self._pacemaker)

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the loop; wait up to ``timeout_s`` for the thread if it runs (not from itself)."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()
        if self._pacemaker is not None:
            self._pacemaker.wake()
        self._coordinator.wake_network()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout_s)

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = exc
            self._cond.notify_all()

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        log.debug("heartbeat thread of group %s started", self._coordinator.group_id)
        try:
            while True:
                pacemaker = None
                with self._lock:
                    action = self.run_once()
                    if action == EXIT:
                        break
                    if action == WAIT_FOR_EVENT:
                        self._cond.wait()
                        continue
                    if action == WAIT_FOR_PACEMAKER:
                        pacemaker = self._pacemaker
                    elif action > 0 and not self._coordinator.has_pending_coordinator_requests():
                        self._cond.wait(action / 1000.0)
                        continue
                if pacemaker is not None:
                    # Outside the lock: the wait releases the GIL; events are applied under it.
                    pacemaker.wait_and_drain(PACEMAKER_WAIT_MAX_MS)
                elif action > 0:
                    self._wait_for_response(action)
        except BaseException as exc:  # mechanisms §2 step 8: end the thread, the next poll() raises it
            log.error("heartbeat thread of group %s failed: %r", self._coordinator.group_id, exc,
                      exc_info=not isinstance(exc, Errors.KafkaError))
            self.fail(exc)
        finally:
            log.debug("heartbeat thread of group %s stopped", self._coordinator.group_id)

    def _wait_for_response(self, wait_ms: int) -> None:
        """Wait up to ``wait_ms`` for an in-flight coordinator response, outside the lock."""
        step = min(wait_ms, NETWORK_WAIT_MAX_MS)
        if not self._coordinator.poll_network_nowait(step):
            # The application thread is polling: it reads the response, whose handler
            # notifies the condition.
            with self._lock:
                if not self._closed:
                    self._cond.wait(step / 1000.0)

    def run_once(self) -> int:
        """One iteration of the heartbeat loop (mechanisms §2), holding the coordinator's lock.

        Returns EXIT, WAIT_FOR_EVENT, or the number of ms to wait before the next iteration.
        """
        c = self._coordinator
        with self._lock:
            # 1. closed -> exit; not enabled -> wait; not STABLE -> disable
            if self._closed or self._failure is not None:
                return EXIT
            if not self._enabled:
                return WAIT_FOR_EVENT
            if not c.heartbeats_wanted():
                self.disable()
                return 0
            # 2. poll the network without honouring wakeups (only if nobody else is polling)
            c.poll_network_nowait(0)
            if self._closed or self._failure is not None:
                return EXIT
            now = c.now_ms()
            hb = c.heartbeat
            backoff = hb.retry_backoff_ms
            # 3. coordinator unknown -> look it up; in flight or failed at once -> back off
            if c.coordinator_unknown():
                if c.lookup_in_flight():
                    return backoff
                future = c.lookup_coordinator()
                if future.is_done and future.failed():
                    log.debug("heartbeat thread could not start a coordinator lookup: %s",
                              future.exception)
                    return backoff
                return 0
            # The GIL-free pacemaker does steps 4-7 itself; this thread applies its events.
            pacemaker = self._pacemaker
            if pacemaker is not None:
                pacemaker.drain()
                # e.g. a new coordinator's Heartbeat version is known once a request reached it
                pacemaker.membership_changed()
                if pacemaker.engaged:
                    return WAIT_FOR_PACEMAKER
            # 4. no successful heartbeat within session.timeout.ms -> coordinator unknown
            if hb.session_timeout_expired(now):
                c.mark_coordinator_unknown(
                    f"no heartbeat response within session.timeout.ms ({hb.session_timeout_ms} ms)")
                return 0
            # 5. the application did not call poll() within max.poll.interval.ms -> leave
            if hb.poll_timeout_expired(now):
                c.on_poll_timeout(now)
                return 0
            # 6. not yet time: wait until the next heartbeat, session expiry or poll expiry
            if not hb.should_heartbeat(now):
                return max(hb.next_wakeup_ms(now) - now, 1)
            # 7. send a heartbeat
            hb.sent_heartbeat(now)
            future = c.send_heartbeat_request()
            future.add_listener(_HeartbeatListener(self))
            return 0


class _HeartbeatListener:
    """Outcome of one heartbeat (mechanisms §2 step 7); runs on whichever thread read the response."""

    __slots__ = ("thread",)

    def __init__(self, thread: HeartbeatThread):
        self.thread = thread

    def on_success(self, _value) -> None:
        t = self.thread
        c = t.host
        with c.lock:
            c.heartbeat.received_heartbeat(c.now_ms())

    def on_failure(self, exc: BaseException) -> None:
        t = self.thread
        c = t.host
        with c.lock:
            now = c.now_ms()
            if isinstance(exc, Errors.RebalanceInProgressError):
                # The coordinator still knows us: keep the session alive until we rejoin.
                c.heartbeat.received_heartbeat(now)
            elif isinstance(exc, _FATAL) or not isinstance(exc, Errors.KafkaError):
                t.fail(exc)
            else:
                c.heartbeat.fail_heartbeat(now)
                # wake the waiting thread so it reschedules (retry after retry.backoff.ms)
                t.wake()

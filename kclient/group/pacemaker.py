"""The coordinator's side of the GIL-free heartbeat pacemaker (mechanisms §2).

``kcore.pacemaker.Pacemaker`` heartbeats without the GIL, so a member survives a C call
that holds the GIL for longer than session.timeout.ms. This module is the small interface
between it and ``AbstractCoordinator``:

- ``PacemakerLink.sync()`` (holding the coordinator lock, after any membership change)
  tells the pacemaker whom to heartbeat as and where: it heartbeats while the member is
  STABLE or COMPLETING_REBALANCE with a known coordinator, and stops otherwise.
- ``drain()`` (the application's poll) and ``wait_and_drain()`` (the Python heartbeat
  thread, parked without the GIL) apply the pacemaker's events to the coordinator: a rejoin
  request, a generation reset, a lost coordinator, a poll timeout, a fatal error.

While the pacemaker is engaged the Python heartbeat thread sends no heartbeats; it still
looks the coordinator up when it is lost. Where the pacemaker cannot work (security
protocols other than PLAINTEXT: TLS and SASL state lives in Python objects that need the
GIL), ``create_link`` returns None with one log line and the Python thread heartbeats.

KIP-848: a ConsumerGroupHeartbeat member would implement its own ``sync`` payload; the
events and the run/stop life cycle stay the same.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from kclient import errors as Errors
from kclient.protocol import ApiKey

if TYPE_CHECKING:  # pragma: no cover
    from kclient.group.coordinator import AbstractCoordinator

__all__ = ["LinkBase", "PacemakerLink", "create_link", "start_link", "pacemaker_unavailable_reason"]

log = logging.getLogger(__name__)

# Sentinel: the pushed configuration must be sent again at the next sync (after a fatal
# event the pacemaker halted although the membership did not change).
_REPUSH: Any = object()


def pacemaker_unavailable_reason(client: Any) -> str | None:
    """Why the pacemaker cannot serve this network client (None: it can)."""
    inner = getattr(client, "client", client)
    settings = getattr(inner, "settings", None)
    protocol = getattr(settings, "security_protocol", None)
    if protocol is None:
        return "the network client does not say which security.protocol it uses"
    if protocol != "PLAINTEXT":
        return (f"security.protocol {protocol}: TLS and SASL sessions live in Python objects "
                "that need the GIL, so the compiled pacemaker cannot open its own connection")
    return None


def start_link(coordinator: Any, link_class: type, what: str, bound: str) -> Any:
    """A running ``link_class`` for this coordinator, or None with one log line saying why the
    Python thread sends ``what`` instead (and what a GIL-holding call longer than ``bound``
    costs then)."""
    reason = pacemaker_unavailable_reason(coordinator._client)
    if reason is not None:
        log.info("group %s: %s come from the Python heartbeat thread, not the GIL-free pacemaker (%s); a C "
                 "call holding the GIL longer than %s will cost this member its partitions",
                 coordinator.group_id, what, reason, bound)
        return None
    inner = getattr(coordinator._client, "client", coordinator._client)
    return link_class(coordinator, getattr(inner, "client_id", None))


def create_link(coordinator: "AbstractCoordinator") -> "PacemakerLink | None":
    """A running pacemaker for this coordinator, or None (the Python thread heartbeats)."""
    return start_link(coordinator, PacemakerLink, "heartbeats", "session.timeout.ms")


class LinkBase:
    """What both links share: the pacemaker, its run() thread, the event plumbing. Subclasses
    decide what to push (``sync``) and how events change the coordinator (``_apply``)."""

    def __init__(self, coordinator: Any, client_id: str | None):
        from kcore.pacemaker import Pacemaker

        self._c = coordinator
        self._pm = Pacemaker(coordinator.heartbeat, client_id)
        self._pushed: Any = None          # the configuration last pushed (None: not engaged)
        self._fallen_back = False         # the pacemaker could not connect: the Python thread heartbeats
        self._epoch = 0                   # the pacemaker's configuration epoch (events carry it)
        self._thread = threading.Thread(target=self._pm.run, daemon=True,
                                        name=f"kclient-pacemaker-{coordinator.group_id}")
        self._thread.start()

    @property
    def pacemaker(self) -> Any:
        """The kcore.pacemaker.Pacemaker (statistics, send times)."""
        return self._pm

    @property
    def engaged(self) -> bool:
        """The pacemaker, not the Python thread, is responsible for heartbeats now."""
        return self._pushed is not None

    def drain(self) -> None:
        """Apply events already posted (the application's poll)."""
        events = self._pm.take_events()
        if events:
            with self._c._lock:
                self._apply(events)

    def wait_and_drain(self, timeout_ms: int) -> None:
        """Wait without the GIL for events (at most timeout_ms), then apply them."""
        events = self._pm.wait_events(max(0, int(timeout_ms)))
        if events:
            with self._c._lock:
                self._apply(events)

    def wake(self) -> None:
        self._pm.wake()

    def close(self, timeout_s: float | None = 5.0) -> None:
        self._pushed = None
        self._pm.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _apply(self, events: list) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class PacemakerLink(LinkBase):
    def sync(self) -> None:
        """Push the coordinator's membership; call holding the coordinator lock."""
        from kcore.pacemaker import MAX_HEARTBEAT_VERSION, MAX_LEAVE_GROUP_VERSION

        from kclient.group.coordinator import MemberState

        c = self._c
        want = None
        node = c._coordinator
        gen = c._generation
        if (not c._closed and node is not None and gen.has_member_id() and c.group_id is not None
                and c.state in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE)):
            hv = c._client.api_version(node, ApiKey.HEARTBEAT)
            lv = c._client.api_version(node, ApiKey.LEAVE_GROUP)
            if hv is not None and hv <= MAX_HEARTBEAT_VERSION:
                if lv is not None and lv > MAX_LEAVE_GROUP_VERSION:
                    lv = None
                want = (node.host, node.port, gen.generation_id, gen.member_id, c.group_instance_id, hv,
                        None if c.group_instance_id is not None else lv, c.request_timeout_ms)
            else:
                log.debug("group %s: Heartbeat version %r with %s not known yet: the Python thread "
                          "heartbeats", c.group_id, hv, node)
        if self._fallen_back:
            want = None
        if want == self._pushed:
            return
        self._pushed = want
        if want is None:
            self._epoch = self._pm.deactivate()
            return
        host, port, generation_id, member_id, instance_id, hv, lv, timeout = want
        self._epoch = self._pm.configure(host=host, port=port, group_id=c.group_id or "", member_id=member_id,
                                         generation_id=generation_id, group_instance_id=instance_id,
                                         heartbeat_version=hv, leave_group_version=lv,
                                         request_timeout_ms=timeout)
        log.debug("group %s: pacemaker heartbeats member %s generation %d to %s:%d (Heartbeat v%d)",
                  c.group_id, member_id, generation_id, host, port, hv)

    # ------------------------------------------------------------------ events -> coordinator
    def _apply(self, events: list) -> None:
        from kcore.pacemaker import (CODE_CONNECT_FAILED, CODE_SESSION_EXPIRED, EV_COORDINATOR_LOST, EV_DISCONNECTED,
                                     EV_HEARTBEAT_ERROR, EV_POLL_TIMEOUT)

        from kclient.group.coordinator import MemberState, _error_for

        c = self._c
        for kind, code, epoch, generation, _at_ms, detail in events:
            if epoch != self._epoch:
                log.debug("group %s: ignoring pacemaker event %r of an older configuration", c.group_id,
                          (kind, code))
                continue
            if kind == EV_DISCONNECTED and code == CODE_CONNECT_FAILED and not self._pm.stats()["connects"]:
                # It never reached the coordinator although the main client does (a proxy, a
                # custom resolver or socket factory): heartbeats must not depend on it.
                log.info("group %s: the GIL-free pacemaker could not connect to the coordinator "
                         "(errno %d); the Python heartbeat thread heartbeats instead", c.group_id, detail)
                self._fallen_back = True
            elif kind == EV_DISCONNECTED:
                log.debug("group %s: pacemaker connection to the coordinator failed (%d, errno %d); "
                          "reconnecting", c.group_id, code, detail)
            elif kind == EV_COORDINATOR_LOST:
                if code == CODE_SESSION_EXPIRED:
                    reason = f"no heartbeat response within session.timeout.ms ({c.session_timeout_ms} ms)"
                else:
                    reason = f"{_error_for(code)!r} from Heartbeat"
                c.mark_coordinator_unknown(reason)
            elif kind == EV_POLL_TIMEOUT:
                log.warning(
                    "member %s of group %s: poll() was not called for %d ms, more than max.poll.interval.ms "
                    "(%d ms): the pacemaker left the group (LeaveGroup %s) so its partitions are reassigned; "
                    "the next poll() rejoins. Process records faster, lower max.poll.records, or raise "
                    "max.poll.interval.ms.", c._generation.member_id, c.group_id, detail,
                    c.heartbeat.max_poll_interval_ms, "not sent" if code < 0 else f"answered {code}")
                c.reset_state_and_generation("left the group: poll() not called within max.poll.interval.ms",
                                             reset_member_id=True)
            elif kind == EV_HEARTBEAT_ERROR:
                self._on_heartbeat_error(code, generation, MemberState)
        # Membership changes made above have synced already; make sure a halt is not permanent.
        self.sync()

    def _on_heartbeat_error(self, code: int, generation: int, MemberState: Any) -> None:
        from kclient.group.coordinator import _error_for

        c = self._c
        err = _error_for(code)
        if isinstance(err, Errors.RebalanceInProgressError):
            if c.state is MemberState.STABLE:
                c.request_rejoin("the group is rebalancing (heartbeat answered REBALANCE_IN_PROGRESS)")
            return
        if isinstance(err, (Errors.IllegalGenerationError, Errors.UnknownMemberIdError,
                            Errors.FencedInstanceIdError)):
            if c._generation.generation_id != generation:
                log.debug("group %s: ignoring %r to a heartbeat of an older generation", c.group_id, err)
                self._pushed = _REPUSH
                return
            c.reset_generation_on_response_error("Heartbeat", err)
            if not isinstance(err, Errors.FencedInstanceIdError):
                return
        elif isinstance(err, Errors.GroupAuthorizationFailedError):
            err = Errors.GroupAuthorizationFailedError(f"not authorized to use group {c.group_id!r}")
        elif not isinstance(err, Errors.UnsupportedVersionError):
            log.debug("heartbeat of group %s failed: %r", c.group_id, err)
            return
        # Fatal (mechanisms §2 step 8): the application's next poll() raises it.
        self._pushed = _REPUSH
        thread = c._heartbeat_thread
        if thread is not None:
            thread.fail(err)

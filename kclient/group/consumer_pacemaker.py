"""The KIP-848 coordinator's link to the GIL-free pacemaker, a ``HeartbeatDriver`` (mechanisms §2).

``kcore.pacemaker.Pacemaker.configure_consumer`` heartbeats a ``group.protocol=consumer``
member without the GIL: ConsumerGroupHeartbeat in its short form (group, member, epoch,
instance id; everything else "unchanged"), advancing the member epoch from the answers. This
module is the interface between it and ``ConsumerGroupCoordinator``:

- ``sync()`` (``membership_changed``, holding the coordinator lock) engages the pacemaker while the member is in the
  group (epoch > 0) and STABLE or RECONCILING with a known coordinator and no Python heartbeat
  in flight, and disengages it otherwise. Every heartbeat that must say more than "nothing
  changed" (joining at epoch 0, the acknowledgement of a reconciled assignment, leaving) is the
  Python coordinator's, sent after the pacemaker is disengaged; the epoch the pacemaker
  reached is taken over first (``_adopt``), so Python never heartbeats with a stale one.
- ``drain()`` / ``wait_and_drain()`` apply the pacemaker's events: a new assignment or epoch
  (the answer is decoded by the schema-driven codec and digested by ``ConsumerMembership``
  exactly like an answer to a Python heartbeat), errors (fencing, fatal), a lost coordinator,
  and max.poll.interval.ms expiry (the pacemaker sent the leave heartbeat; the next poll
  reports the partitions lost and rejoins).

While the application holds the GIL, the pacemaker keeps heartbeating with the newest epoch;
the broker waits for the member to acknowledge a new assignment up to its rebalance timeout,
so a member in a long GIL-holding call keeps its partitions (or gives them up in order)
instead of being fenced by a session timeout. Its connection is secured like the main one
(TLS, SASL: ``LinkBase.secure``); where it cannot be (a caller's own ``ssl_context`` object)
``create_consumer_link`` returns None with one log line, as for the classic protocol, and
the ``ConsumerHeartbeatLoop`` alone is the driver. A link carries that loop:
it looks the coordinator up and heartbeats whenever the pacemaker is not engaged.
"""
from __future__ import annotations

import logging
from typing import Any, Protocol

from kclient.group.consumer_heartbeat_loop import ConsumerHeartbeatLoop
from kclient.group.consumer_membership import ConsumerMembership, MemberState as CState
from kclient.group.epoch_link import EpochLink, EpochLinkHost
from kclient.group.pacemaker import start_link
from kclient.network.metadata import Node
from kclient.protocol import ApiKey

__all__ = ["ConsumerPacemakerLink", "ConsumerPacemakerHost", "create_consumer_link"]

log = logging.getLogger(__name__)

#: States in which only "nothing changed" heartbeats are due (the pacemaker's kind).
_ENGAGED_STATES = frozenset({CState.STABLE, CState.RECONCILING})


class ConsumerPacemakerHost(EpochLinkHost, Protocol):
    """What the KIP-848 link needs of its coordinator, beyond what every epoch link needs."""

    @property
    def membership(self) -> ConsumerMembership: ...

    session_timeout_ms: int
    rebalance_timeout_ms: int


def create_consumer_link(coordinator: ConsumerPacemakerHost, client: Any) -> "ConsumerPacemakerLink | None":
    """A running pacemaker for this KIP-848 member, or None (the Python thread heartbeats)."""
    return start_link(coordinator, client, ConsumerPacemakerLink, "ConsumerGroupHeartbeats",
                      "the group's session timeout")


class ConsumerPacemakerLink(EpochLink):
    _c: ConsumerPacemakerHost
    _api = ApiKey.CONSUMER_GROUP_HEARTBEAT
    _loop = ConsumerHeartbeatLoop
    _adopt_states = _ENGAGED_STATES | {CState.ACKNOWLEDGING}
    _log = log
    _group_kind = "group"

    def _target(self, node: Node) -> tuple | None:
        from kcore.pacemaker import MAX_CONSUMER_GROUP_HEARTBEAT_VERSION

        c = self._c
        m = c.membership
        if m.state not in _ENGAGED_STATES:
            return None
        version = c.api_version(node, ApiKey.CONSUMER_GROUP_HEARTBEAT)
        if version is None or version > MAX_CONSUMER_GROUP_HEARTBEAT_VERSION:
            return None
        return (node.host, node.port, m.member_id, m.instance_id, version, c.request_timeout_ms)

    def _configure(self, node: Node, want: tuple) -> int:
        c = self._c
        m = c.membership
        host, port, member_id, instance_id, version, timeout = want
        self.prepare_connection(node, c.api_version)
        c.heartbeat.set_heartbeat_interval_ms(m.heartbeat_interval_ms)
        epoch = self._pm.configure_consumer(
            host=host, port=port, group_id=c.group_id or "", member_id=member_id, member_epoch=m.member_epoch,
            group_instance_id=instance_id, version=version, request_timeout_ms=timeout)
        log.debug("group %s: pacemaker heartbeats member %s from epoch %d to %s:%d (ConsumerGroupHeartbeat v%d)",
                  c.group_id, member_id, m.member_epoch, host, port, version)
        return epoch

    def _coordinator_lost_reason(self, code: int) -> str:
        from kcore.pacemaker import CODE_SESSION_EXPIRED

        if code == CODE_SESSION_EXPIRED:
            return f"no heartbeat response within session.timeout.ms ({self._c.session_timeout_ms} ms)"
        return f"error {code} from ConsumerGroupHeartbeat"

    def _on_poll_timeout(self, code: int, detail: int) -> None:
        c = self._c
        m = c.membership
        self._disengage()
        log.warning(
            "member %s of group %s: poll() was not called for %d ms, more than max.poll.interval.ms "
            "(%d ms): the pacemaker left the group (%s) so its partitions are reassigned; the next "
            "poll() rejoins. Process records faster, lower max.poll.records, or raise "
            "max.poll.interval.ms.", m.member_id, c.group_id, detail, c.rebalance_timeout_ms,
            "leave not sent" if code < 0 else f"leave answered {code}")
        m.fenced("poll timeout")

"""The share coordinator's link to the GIL-free pacemaker, a ``HeartbeatDriver``.

``kcore.pacemaker.Pacemaker.configure_share`` heartbeats a share member without the GIL:
ShareGroupHeartbeat in its short form (group, member, epoch; rack and subscription "unchanged"),
advancing the member epoch from the answers. A member whose application holds the GIL (a long
C call) for longer than the group's session timeout (``group.share.session.timeout.ms``) so
keeps its membership, and the records it acquired stay with it.

- ``sync()`` (``membership_changed``, holding the coordinator lock) engages the pacemaker while
  the member is STABLE at an epoch > 0, the broker has answered a heartbeat carrying the
  current subscription, the coordinator is known and no Python heartbeat is in flight; it
  disengages it otherwise. Every heartbeat that says more than "nothing changed" (joining at
  epoch 0, a new subscription, leaving with epoch -1) is the Python coordinator's, sent after
  the pacemaker is disengaged and its newest epoch taken over (``_adopt``).
- ``drain()`` / ``wait_and_drain()`` apply the pacemaker's events: a new assignment or epoch
  (the answer is decoded by the schema-driven codec and digested by ``ShareMembership``
  exactly like an answer to a Python heartbeat), errors (fenced, fatal) and a lost coordinator.

Where the pacemaker cannot work, ``create_share_driver`` returns the Python heartbeat loop alone.
"""
from __future__ import annotations

import logging
from typing import Any, Protocol

from kclient.group.epoch_link import EpochLink, EpochLinkHost
from kclient.group.heartbeat_driver import HeartbeatDriver
from kclient.group.pacemaker import start_link
from kclient.network.metadata import Node
from kclient.protocol import ApiKey
from kclient.share.heartbeat_loop import ShareHeartbeatLoop
from kclient.share.membership import ShareMembership, ShareMemberState

__all__ = ["SharePacemakerLink", "SharePacemakerHost", "create_share_driver"]

log = logging.getLogger(__name__)


class SharePacemakerHost(EpochLinkHost, Protocol):
    """What the share link needs of its coordinator, beyond what every epoch link needs."""

    @property
    def membership(self) -> ShareMembership: ...

    def subscription_acknowledged(self) -> bool:
        """The broker answered a heartbeat that carried the current subscription."""


def create_share_driver(coordinator: SharePacemakerHost, client: Any) -> HeartbeatDriver:
    """The share member's heartbeat driver: a running pacemaker link, or (where the pacemaker
    cannot work) the Python heartbeat loop alone. Neither is started."""
    link = start_link(coordinator, client, SharePacemakerLink, "ShareGroupHeartbeats",
                      "the share group's session timeout")
    return link if link is not None else ShareHeartbeatLoop(coordinator)


class SharePacemakerLink(EpochLink):
    _c: SharePacemakerHost
    _api = ApiKey.SHARE_GROUP_HEARTBEAT
    _loop = ShareHeartbeatLoop
    _adopt_states = frozenset({ShareMemberState.STABLE})
    _log = log
    _group_kind = "share group"

    def _target(self, node: Node) -> tuple | None:
        from kcore.pacemaker import MAX_SHARE_GROUP_HEARTBEAT_VERSION

        c = self._c
        m = c.membership
        if m.state is not ShareMemberState.STABLE or not c.subscription_acknowledged():
            return None
        version = c.api_version(node, ApiKey.SHARE_GROUP_HEARTBEAT)
        if version is None or not 1 <= version <= MAX_SHARE_GROUP_HEARTBEAT_VERSION:
            return None
        return (node.host, node.port, m.member_id, version, c.request_timeout_ms)

    def _configure(self, node: Node, want: tuple) -> int:
        c = self._c
        m = c.membership
        host, port, member_id, version, timeout = want
        # The SaslAuthenticate version negotiated with this node and the newest OAUTHBEARER
        # token, as the other links take them before they engage.
        self.prepare_connection(node, c.api_version)
        now = c.now_ms()
        c.heartbeat.set_heartbeat_interval_ms(m.heartbeat_interval_ms)
        # Python's heartbeat was just answered: the session is fresh, the next one due an interval later.
        c.heartbeat.reset_timeouts(now)
        c.heartbeat.received_heartbeat(now)
        epoch = self._pm.configure_share(host=host, port=port, group_id=c.group_id or "", member_id=member_id,
                                         member_epoch=m.member_epoch, version=version, request_timeout_ms=timeout)
        log.debug("share group %s: pacemaker heartbeats member %s from epoch %d to %s:%d (ShareGroupHeartbeat v%d)",
                  c.group_id, member_id, m.member_epoch, host, port, version)
        return epoch

    def _coordinator_lost_reason(self, code: int) -> str:
        from kcore.pacemaker import CODE_SESSION_EXPIRED

        if code == CODE_SESSION_EXPIRED:
            return f"no heartbeat response within {self._c.heartbeat.session_timeout_ms} ms"
        return f"error {code} from ShareGroupHeartbeat"

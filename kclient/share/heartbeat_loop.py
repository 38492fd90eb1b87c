"""A share member's Python heartbeat thread: the group layer's loop for broker-driven
memberships (``ConsumerHeartbeatLoop``, a ``HeartbeatDriver``) with the share membership's
heartbeating states. Like the KIP-848 loop it never waits for the network client's lock and
sleeps on the coordinator's condition until the next heartbeat is due. Carried by the share
pacemaker link (``pacemaker``), it parks without the GIL while the pacemaker heartbeats.
"""
from __future__ import annotations

from kclient.group.consumer_heartbeat_loop import ConsumerHeartbeatLoop, ConsumerLoopHost
from kclient.group.heartbeat_driver import GilFreeSender
from kclient.share.membership import HEARTBEATING

__all__ = ["ShareHeartbeatLoop", "ShareLoopHost"]

#: What the loop needs of the share coordinator: the same as of a KIP-848 one.
ShareLoopHost = ConsumerLoopHost


class ShareHeartbeatLoop(ConsumerHeartbeatLoop):
    def __init__(self, coordinator: ConsumerLoopHost, pacemaker: GilFreeSender | None = None):
        super().__init__(coordinator, pacemaker, heartbeating=HEARTBEATING,
                         name=f"kclient-share-heartbeat-{coordinator.group_id}")

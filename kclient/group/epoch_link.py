"""What the pacemaker links of the broker-driven memberships share: the KIP-848 consumer
member's (``ConsumerPacemakerLink``) and the share member's (``SharePacemakerLink``).

Their pacemaker heartbeats in the protocol's short form ("nothing changed") and advances the
member epoch from the answers; Python sends every other heartbeat, after the pacemaker is
disengaged and the epoch it reached (with the newest assignment it received) taken over
(``_adopt``), so Python never heartbeats with a stale epoch. ``EpochLink.sync`` engages it
only while the member is in the group (epoch > 0, no fatal error) with a known coordinator
and no Python heartbeat in flight; a link says what else it needs and what it pushes
(``_target``, ``_configure``). ``_apply`` takes the pacemaker's events the same way for both:
an answer with an assignment is adopted, a lost coordinator or a heartbeat error disengages
the pacemaker and goes to the coordinator, a first connection that never succeeded leaves
the heartbeats to Python.
"""
from __future__ import annotations

import logging
from typing import Any, ClassVar, Protocol

from kcore.timers import Heartbeat

from kclient import protocol
from kclient.group.consumer_heartbeat_loop import ConsumerHeartbeatLoop, ConsumerLoopHost
from kclient.group.pacemaker import LinkBase
from kclient.network.metadata import Node

__all__ = ["EpochLink", "EpochLinkHost", "EpochMembership"]


class EpochMembership(Protocol):
    """What the link reads and advances of a membership."""

    state: Any
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    fatal_error: BaseException | None

    def on_response(self, response: dict) -> BaseException | None: ...


class EpochLinkHost(ConsumerLoopHost, Protocol):
    """What an epoch link needs of its coordinator, beyond what its Python loop needs."""

    @property
    def membership(self) -> EpochMembership: ...

    heartbeat: Heartbeat
    request_timeout_ms: int

    def coordinator(self) -> Node | None: ...

    def api_version(self, node: Node, api: int) -> int | None: ...

    def mark_coordinator_unknown(self, reason: str) -> None: ...

    def on_heartbeat_error(self, err: BaseException, node: Node | None) -> None:
        """React to an error a heartbeat answered (holding the lock)."""


class EpochLink(LinkBase):
    """A link whose pacemaker advances a member epoch. A subclass names its heartbeat API
    (``_api``: the pacemaker's answers are decoded as that API's), the Python loop it carries
    (``_loop``), the states in which the pacemaker's answers are taken over (``_adopt_states``),
    its logger and how its log lines name the group (``_log``, ``_group_kind``), and implements
    ``_target``, ``_configure`` and ``_coordinator_lost_reason``."""

    _c: EpochLinkHost
    _api: ClassVar[int]
    _loop: ClassVar[type[ConsumerHeartbeatLoop]]
    _adopt_states: ClassVar[frozenset]
    _log: ClassVar[logging.Logger]
    _group_kind: ClassVar[str]

    def __init__(self, coordinator: EpochLinkHost, client_id: str | None):
        super().__init__(coordinator.heartbeat, coordinator.lock, coordinator.group_id, client_id)
        self._c = coordinator
        self._python = self._loop(coordinator, self)
        #: Answers with an assignment that came through the pacemaker and were digested.
        self.assignments_adopted = 0

    def sync(self) -> None:
        """Engage or disengage to match the membership; call holding the coordinator lock."""
        c = self._c
        m = c.membership
        want = None
        node = c.coordinator()
        if (not c.closed and not self._fallen_back and node is not None and not c.heartbeat_in_flight()
                and m.member_epoch > 0 and m.fatal_error is None):
            want = self._target(node)
        if want == self._pushed:
            return
        if want is None:
            self._disengage()
            return
        assert node is not None     # want is only set with a coordinator
        self._epoch = self._configure(node, want)
        self._pushed = want

    def _target(self, node: Node) -> tuple | None:
        """What to push for a member in the group (the epoch is not part of it: while engaged,
        the pacemaker advances it), or None where this protocol's pacemaker must not engage."""
        raise NotImplementedError

    def _configure(self, node: Node, want: tuple) -> int:
        """Engage the pacemaker with ``want`` from the member's current epoch; the
        configuration's epoch."""
        raise NotImplementedError

    def _coordinator_lost_reason(self, code: int) -> str:
        """Why the coordinator is marked unknown after the pacemaker lost it with ``code``."""
        raise NotImplementedError

    def _on_poll_timeout(self, code: int, detail: int) -> None:
        """The pacemaker left the group because poll() was not called in time (a link whose
        pacemaker never does says nothing)."""

    def disengage(self) -> None:
        """Python sends the next heartbeat (holding the coordinator lock); ``sync`` after its
        answer engages the pacemaker again."""
        self._disengage()

    def _disengage(self) -> None:
        """Stop the pacemaker and take over what it learnt (holding the coordinator lock)."""
        if self._pushed is None:
            return
        self._pushed = None
        self._epoch = self._pm.deactivate()
        self._adopt()

    def _adopt(self) -> None:
        """Bring the membership up to the pacemaker's newest answer: its assignment, if Python
        has not digested it yet, and its epoch (a heartbeat with an older one is fenced)."""
        m = self._c.membership
        if m.state not in self._adopt_states:
            return
        taken = self._pm.take_assignment()
        if taken is not None:
            _seq, version, frame = taken
            response = protocol.decode_response(self._api, version, frame)
            if response.get("member_epoch", 0) >= m.member_epoch:
                m.on_response(response)
                self.assignments_adopted += 1
        epoch = self._pm.member_epoch
        if epoch > m.member_epoch:
            m.member_epoch = epoch

    # ------------------------------------------------------------------ events -> coordinator
    def _apply(self, events: list) -> None:
        from kcore.pacemaker import (CODE_CONNECT_FAILED, EV_ASSIGNMENT, EV_COORDINATOR_LOST, EV_DISCONNECTED,
                                     EV_HEARTBEAT_ERROR, EV_POLL_TIMEOUT)

        c = self._c
        m = c.membership
        for kind, code, epoch, _epoch_or_gen, _at_ms, detail in events:
            if epoch != self._epoch:
                continue   # of a configuration that is gone (_disengage adopted what mattered)
            if kind == EV_ASSIGNMENT:
                self._adopt()
            elif kind == EV_DISCONNECTED and code == CODE_CONNECT_FAILED and not self._pm.stats()["connects"]:
                self._log.info("%s %s: the GIL-free pacemaker could not connect to the coordinator (%s); the "
                               "Python heartbeat thread heartbeats instead", self._group_kind, c.group_id,
                               self.connect_failure(detail))
                self._fallen_back = True
            elif kind == EV_DISCONNECTED:
                self._log.debug("%s %s: pacemaker connection to the coordinator failed (%d, errno %d); "
                                "reconnecting", self._group_kind, c.group_id, code, detail)
            elif kind == EV_COORDINATOR_LOST:
                self._disengage()
                c.mark_coordinator_unknown(self._coordinator_lost_reason(code))
            elif kind == EV_POLL_TIMEOUT:
                self._on_poll_timeout(code, detail)
            elif kind == EV_HEARTBEAT_ERROR:
                self._disengage()
                err = m.on_response({"error_code": code})
                if err is not None:
                    c.on_heartbeat_error(err, c.coordinator())
        self.sync()
        c.cond.notify_all()
        c.wake_network()

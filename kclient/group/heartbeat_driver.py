"""What keeps a group member's heartbeats going, seen from its coordinator.

A coordinator chooses its driver once, when it starts heartbeating, and talks to it only
through ``HeartbeatDriver``:

- a Python heartbeat thread alone (``HeartbeatThread`` for the classic protocol,
  ``ConsumerHeartbeatLoop`` for KIP-848), where the GIL-free pacemaker cannot work;
- a pacemaker link (``PacemakerLink``, ``ConsumerPacemakerLink``): the compiled pacemaker
  heartbeats without the GIL, and the Python thread it carries looks the coordinator up,
  applies the pacemaker's events and heartbeats itself whenever the pacemaker is not engaged.

Another group protocol plugs in the same way: its own Python loop, and its own link over
the pacemaker, both behind this interface.

``GilFreeSender`` is what a Python heartbeat thread asks of the link that carries it.
"""
from __future__ import annotations

from typing import Protocol

__all__ = ["HeartbeatDriver", "GilFreeSender"]


class HeartbeatDriver(Protocol):
    """A member's heartbeat machinery, as its coordinator drives it."""

    def start(self) -> None:
        """Start the driver's threads."""

    def enable(self) -> None:
        """The member heartbeats from now on: a fresh session and poll interval."""

    def disable(self) -> None:
        """The member stops heartbeating until ``enable``."""

    def membership_changed(self) -> None:
        """The member, its generation or epoch, its state or its coordinator changed (call
        holding the coordinator's lock)."""

    def drain(self) -> None:
        """Apply what the driver learnt meanwhile (the application thread's poll)."""

    def wake(self) -> None:
        """Make the driver's threads look at the membership again now."""

    def disengage(self) -> None:
        """Python sends the next heartbeat (it must say more than "nothing changed"); a later
        ``membership_changed`` engages the GIL-free sender again (holding the lock)."""

    @property
    def engaged(self) -> bool:
        """The GIL-free pacemaker, not Python, sends the heartbeats now."""

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the driver (the application's next poll raises it)."""

    def restarted(self) -> "HeartbeatDriver":
        """After a failure: a driver that can be started again, keeping what survives one
        (the pacemaker's connection)."""

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the driver and wait up to ``timeout_s`` for its threads (None: no bound)."""


class GilFreeSender(Protocol):
    """The pacemaker link, as the Python heartbeat thread it carries sees it."""

    @property
    def engaged(self) -> bool:
        """The pacemaker heartbeats now: the Python thread sends none."""

    def drain(self) -> None:
        """Apply events already posted."""

    def membership_changed(self) -> None:
        """Push the membership again (holding the coordinator's lock)."""

    def wait_and_drain(self, timeout_ms: int) -> None:
        """Wait without the GIL for events (at most ``timeout_ms``), then apply them."""

    def wake(self) -> None:
        """End a ``wait_and_drain`` in progress."""

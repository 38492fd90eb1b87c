"""The shape of one SASL authentication exchange, shared by every mechanism's module."""
from __future__ import annotations

__all__ = ["SaslMechanism"]


class SaslMechanism:
    """One authentication exchange: ``first()``, then ``step(challenge)`` for each answer
    until ``complete``."""

    name = ""
    complete = False
    server_host: str | None = None    # the broker's host name, set by the connection before first()

    def first(self) -> bytes:
        raise NotImplementedError

    def step(self, challenge: bytes) -> bytes | None:
        """The next message for the server's ``challenge`` (None: nothing more to send)."""
        raise NotImplementedError

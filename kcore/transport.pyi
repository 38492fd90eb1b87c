"""A broker connection's bytes without the GIL: connect, send all, receive one frame (compiled).

The C functions behind this module serve kcore's GIL-free parts (the receive loop, the
pacemaker); ``Connection`` and ``frame_size`` expose them to Python with the GIL released
around I/O. A frame is ``int32 size`` + ``size`` bytes; a negative size raises
InvalidLengthError, one above the caller's bound FrameTooLargeError, before anything is read
into or allocated for the frame.
"""
from __future__ import annotations

from kcore.tls import TlsContext

_Buffer = bytes | bytearray | memoryview

__all__ = ["Connection", "frame_size"]


def frame_size(prefix: _Buffer, max_frame_bytes: int) -> int:
    """The length in a 4-byte size prefix (ValueError unless 4 bytes; InvalidLengthError,
    FrameTooLargeError)."""


class Connection:
    def __init__(self, fd: int = -1) -> None:
        """Use a connected socket the caller owns (made non-blocking); -1: none."""
    @staticmethod
    def open(host: str | bytes, port: int, timeout_ms: int) -> Connection:
        """Connect, trying each address of host (OSError with the last errno)."""
    @property
    def fd(self) -> int: ...
    @property
    def tls(self) -> bool:
        """TLS is established on this connection."""
    def start_tls(self, context: TlsContext, server_hostname: str | bytes, timeout_ms: int) -> None:
        """The TLS handshake, without the GIL (TlsHandshakeError saying why, TimeoutError)."""
    def send_all(self, data: _Buffer, timeout_ms: int) -> None:
        """Write all of data (TimeoutError, OSError)."""
    def recv_frame(self, max_frame_bytes: int, timeout_ms: int, wake_fd: int = -1) -> bytes | None:
        """The next frame without its prefix; None if wake_fd became readable first.
        TimeoutError (the next call goes on with the same frame), KafkaConnectionError at end
        of stream, InvalidLengthError / FrameTooLargeError, OSError."""
    def close(self) -> None:
        """Close the socket if open() made it; forget it either way."""

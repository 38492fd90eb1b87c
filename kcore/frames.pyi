"""Typed public API of kcore.frames (compiled): Kafka headers and the frame splitter."""

from typing import Any

class Frame:
    """A large received frame: read-only bytes-like (buffer protocol, format "B") over a
    recycled kcore.pool block; equal to bytes-like objects of the same content."""

    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __eq__(self, other: object) -> bool: ...
    __hash__: None  # type: ignore[assignment]

_Buffer = bytes | bytearray | memoryview | Frame

def encode_request_header(api_key: int, api_version: int, correlation_id: int,
                          client_id: str | None, header_version: int = 1) -> bytes: ...
def decode_request_header(frame: _Buffer, header_version: int = 1
                          ) -> tuple[int, int, int, str | None, int]:
    """(api_key, api_version, correlation_id, client_id, body_offset)."""
def peek_request_api(frame: _Buffer) -> tuple[int, int]: ...
def encode_response_header(correlation_id: int, header_version: int = 0) -> bytes: ...
def decode_response_header(frame: _Buffer, header_version: int = 0) -> tuple[int, int]:
    """(correlation_id, body_offset)."""
def response_correlation_id(frame: _Buffer) -> int: ...

class FrameSplitter:
    """Incremental splitter of a length-prefixed byte stream into frames (prefix removed)."""

    max_frame_bytes: int
    def __init__(self, max_frame_bytes: int = 104857600) -> None: ...
    @property
    def buffered_bytes(self) -> int: ...
    @property
    def pending_frame_size(self) -> int | None: ...
    def reset(self) -> None: ...
    def feed(self, chunk: _Buffer) -> list[bytes | memoryview]:
        """Frames completed by ``chunk``; raises InvalidLengthError / FrameTooLargeError on a
        negative / over-limit size prefix before allocating."""

class FrameReceiver:
    """Reads frames (prefix removed) from a socket: small ones out of a reused receive buffer
    (one copy each, as bytes), large ones straight into their final object, a Frame over a
    recycled block (no per-read allocation, no fresh pages, no copy beyond the part that
    arrived with the prefix)."""

    max_frame_bytes: int
    buffer_size: int
    received_bytes: int
    def __init__(self, max_frame_bytes: int = 104857600, buffer_size: int = 65536) -> None: ...
    @property
    def buffered_bytes(self) -> int: ...
    @property
    def pending_frame_size(self) -> int | None: ...
    def reset(self) -> None: ...
    def receive(self, sock: Any, drain: bool = False, wait_ms: int = 0) -> list[bytes | Frame]:
        """Frames completed by reading ``sock`` (anything with ``recv_into``). Stops when a
        read comes back short or would block (BlockingIOError: returns what it has), and
        unless ``drain`` as soon as a read completed a frame. With ``wait_ms`` > 0 (``sock``
        then needs a ``fileno()`` that poll() can watch), a short read in the middle of a
        large frame waits up to that long, without the GIL, for more of it before returning.
        Raises InvalidLengthError / FrameTooLargeError on a negative / over-limit size prefix
        before allocating, and KafkaConnectionError at end of stream; other socket errors
        propagate."""

"""Receiving a connection's frames on a thread of its own, without the GIL (compiled).

``run()`` (on a dedicated thread) reads a non-blocking socket and frames what it reads
without ever holding the GIL; the owner waits for ``wake_fd`` to become readable and collects
complete frames with ``take()``: ``bytes`` below ``buffer_size // 2``, kcore.frames.Frame
(over a recycled kcore.pool block) from there on. Once every frame was taken, ``take()``
raises why the loop ended: KafkaConnectionError at end of stream (saying how much of a frame
had arrived), InvalidLengthError / FrameTooLargeError for a bad size prefix, OSError for a
socket error, KafkaConnectionError("... stopped") after ``stop()``. Stop, join the thread,
``close()``, then close the socket.
"""
from __future__ import annotations

from kcore.fetchscan import ScannedFetch
from kcore.frames import Frame

STASH_BLOCKS: int
"""Pooled blocks take() hands the loop for its next large frames."""


class ReceiveLoop:
    fd: int
    max_frame_bytes: int
    buffer_size: int

    def __init__(self, fd: int, max_frame_bytes: int = 104857600, buffer_size: int = 65536) -> None:
        """ValueError for fd < 0, max_frame_bytes outside [0, 2**31-1], buffer_size outside
        [64, 2**31-1]; OSError if the pipes cannot be made."""
    @property
    def wake_fd(self) -> int:
        """Readable while frames or the loop's end wait to be taken."""
    @property
    def received_bytes(self) -> int:
        """Every byte read from the socket so far."""
    @property
    def stashed(self) -> tuple[int, ...]:
        """Sizes of the pooled blocks waiting for the loop's next large frames, oldest first
        (at most STASH_BLOCKS; a full stash gives its oldest back for a newer one)."""
    @property
    def running(self) -> bool: ...
    def run(self) -> None:
        """Receive until stop(), end of stream or an error (call on a dedicated thread;
        RuntimeError if it ran before or the loop was closed or stopped)."""
    def take(self) -> list[bytes | Frame]:
        """The frames completed so far, in order (maybe none); raises the loop's end once
        every frame was taken."""
    def expect_fetch(self, correlation_id: int, version: int, check_crcs: bool, batches: bool = True) -> None:
        """Scan the response to this Fetch (sent after this call) as it arrives, if it is a
        large frame (kcore.fetchscan): its structure, and with ``batches`` its record
        batches; at most 16 wait, the oldest is forgotten."""
    def take_scanned(self, correlation_id: int) -> ScannedFetch | None:
        """That response's scan once its frame was taken, or None; handed out once."""
    def stop(self) -> None:
        """Make run() return soon; idempotent."""
    def close(self) -> None:
        """Free the buffers and close the pipes (RuntimeError while run() runs)."""

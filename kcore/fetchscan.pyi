"""The record batches of a Fetch response, checked and scanned while it arrives (compiled).

A connection's receive thread (kcore.receive_loop) feeds each announced Fetch response to a
scan as its bytes come in: the response's structure is parsed as far as the bytes go, and
each complete, uncompressed v2 data batch is CRC-checked and validated into position arrays
without the GIL, while its bytes are still in the receiving core's cache.
kcore.records.decode_columnar(data, scanned=...) then makes the partition's ColumnarBatch from
that scan (scanning, without the GIL, any batches left) instead of decoding again; anything
else (compressed, control or legacy batches, a bad CRC, a malformed record) is left to the
ordinary decode, which raises what it always raised.
"""
from __future__ import annotations

BLOB_STATES: dict[int, str]
"""A partition's scan states by number: scanning, done, fallback, taken."""


class ScannedRecords:
    """One partition's records as the receive thread scanned them."""

    @property
    def state(self) -> str:
        """'done', 'scanning' (batches left, scanned by decode_columnar) or 'fallback'."""
    @property
    def num_records(self) -> int:
        """Records scanned so far."""
    @property
    def scanned_bytes(self) -> int:
        """Bytes of the batches scanned so far."""


class ScannedFetch:
    """The scan of one received Fetch response frame."""

    @property
    def complete(self) -> bool:
        """Whether the whole structure was parsed."""
    def __len__(self) -> int:
        """Partitions with a records field found so far."""
    @property
    def array_bytes(self) -> int:
        """Bytes of the position arrays the scan holds (not yet handed out)."""
    def answer(self, frame: bytes | bytearray | memoryview,
               scans: bool = True) -> tuple[int, int, int, int, list[tuple]] | None:
        """``(throttle_time_ms, error_code, session_id, array_bytes, partitions)`` read from
        the scan of ``frame`` (the frame scanned), each partition a tuple ``(topic, partition,
        error_code, high_watermark, last_stable_offset, log_start_offset,
        preferred_read_replica, records, scanned)`` (topic: the name, or from v13 its id as a
        uuid.UUID; records: a slice of ``frame`` or None; scanned: its ScannedRecords, handed
        out here, None without ``scans``); None when the protocol decoder must read it (structure not wholly parsed or
        bytes after it, another frame, aborted transactions, tagged fields, a name not UTF-8)."""
    def records_for(self, view: memoryview | bytes | None) -> ScannedRecords | None:
        """The scan of the partition whose records field ``view`` is (a slice of this frame,
        as the protocol decoder cut it), once; None if none matches."""


def scan_fetch_response(frame: bytes | bytearray | memoryview, version: int, check_crcs: bool = True,
                        chunk: int = 0, budget: int = -1) -> ScannedFetch:
    """Scan a whole Fetch response frame (without its size prefix) as a receive thread does:
    ``chunk`` bytes at a time (0: at once), up to ``budget`` bytes of batches after each
    (-1: all, 0: none), the rest of the structure at the end. ValueError for a version
    outside 4-18. The frame must outlive the result, unchanged."""


def next_fetch_offset(data: bytes | bytearray | memoryview, fetch_offset: int) -> tuple[int, int]:
    """(offset after the last complete batch in a partition's records ``data``, that batch's
    partition leader epoch or -1), from the entries' headers only (a legacy entry is one
    message at its own offset, epoch -1); ``(fetch_offset, -1)`` if no complete entry ends
    past ``fetch_offset``. The walk stops at an entry too short or running past the end, or
    whose offsets would pass 2**63 - 1."""

"""What ``ParallelConsumer.metrics()`` returns: a consistent snapshot, readable from any thread."""
from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ParallelMetrics", "PartitionMetrics", "ShareParallelMetrics"]


@dataclasses.dataclass(frozen=True)
class PartitionMetrics:
    in_flight: int                 # handlers running now
    queued: int                    # received, waiting for a worker (or for their key's turn)
    committed: int | None          # last offset this ParallelConsumer committed (None: none yet)
    committable: int | None        # the completed prefix's end: what the next commit sends
    received: int | None           # last received offset + 1
    commit_lag: int                # offsets received but not committed
    paused: bool                   # fetching paused by backpressure


@dataclasses.dataclass(frozen=True)
class ParallelMetrics:
    in_flight: int
    queued: int
    queued_bytes: int
    completed: int                 # handled successfully
    failed: int                    # failed after retries (skipped ones included)
    skipped: int                   # failed and skipped by on_error
    retries: int                   # handler calls repeated after a failure
    dropped: int                   # queued records dropped (revocation, shutdown): redelivered later
    max_in_flight: int             # most handlers seen running at once
    commits: int                   # commits sent
    paused: bool                   # every partition paused for the queue bound
    partitions: dict[Any, PartitionMetrics]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ShareParallelMetrics:
    """``metrics()`` of ParallelConsumer on a share group."""
    in_flight: int                 # handlers running now
    queued: int                    # records of the current poll waiting for a worker
    outstanding: int               # records of the current poll not acknowledged yet
    accepted: int                  # handled: acknowledged ACCEPT
    released: int                  # failed or not handled: RELEASE (delivered again)
    rejected: int                  # failed, on_error said reject: REJECT (never again)
    retries: int                   # handler calls repeated on the worker after a failure
    dropped: int                   # queued records given up at shutdown (released)
    max_in_flight: int             # most handlers seen running at once
    batches: int                   # polls that returned records
    acknowledgement_failures: int  # acknowledgements the broker refused (those records come back)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

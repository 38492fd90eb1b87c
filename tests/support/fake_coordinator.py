"""A stand-in for a consumer's group coordinator in unit tests of the poll path (with a fake
clock): it records when the consumer's per-poll coordinator work ran and asks for nothing."""
from __future__ import annotations

from kclient.clock import FakeClock


class _NothingCommitted:
    def refresh_committed_offsets_if_needed(self, timeout_ms) -> bool:
        return True


class RecordingCoordinator:
    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.committer = _NothingCommitted()
        #: The times the consumer handed to record_poll() (the poll's own clock reading).
        self.recorded: list[int] = []
        #: The clock at each poll() of the coordinator (heartbeat check, auto-commit).
        self.polled_at: list[int] = []

    def record_poll(self, now_ms: int) -> None:
        self.recorded.append(now_ms)

    def poll(self, timeout_ms) -> bool:
        # FakeClock's own reading, past any override that counts reads: a test counting the
        # consumer's clock reads counts only the consumer's.
        self.polled_at.append(FakeClock.now_ms(self.clock))
        return True

    def time_to_next_poll(self, now_ms: int) -> int:
        return 2**31 - 1

    def rejoin_needed_or_pending(self) -> bool:
        return False

    def close(self, timeout_ms, autocommit) -> None:
        pass

"""A lock held by another thread for the length of a ``with`` block: for tests of what a
thread does while another one polls (holds the poll lock)."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator


@contextlib.contextmanager
def held_by_another_thread(lock, timeout: float = 20.0) -> Iterator[None]:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(timeout)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert held.wait(timeout), "the other thread did not get the lock"
        yield
    finally:
        release.set()
        holder.join(timeout)

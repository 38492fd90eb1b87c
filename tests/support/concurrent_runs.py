"""Runs that each wait out the same stretch of time (token lifetimes, SASL sessions) made at
once, in threads, instead of one after another: each test then checks its own run's outcome and
the log records every run left during the window."""
from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class Window:
    """The outcome of each run, and the kept log records (``"logger: message"``) of all of them."""

    def __init__(self, outcomes: dict[str, Future], records: list[str]) -> None:
        self.outcomes = outcomes
        self.records = records

    def check(self, run: str) -> None:
        """Raises the run's own failure (its assertion error, with its traceback), if any."""
        self.outcomes[run].result()


def run_at_once(runs: dict[str, Callable[[], None]], logger: str | None = None, level: int = logging.WARNING,
                keep: Callable[[logging.LogRecord], bool] = lambda record: True) -> Window:
    """Every run in its own thread; returns once all have finished, with the records of
    ``logger`` (and its children) at ``level`` or above that ``keep`` accepts."""
    records: list[str] = []
    if logger is None:
        with ThreadPoolExecutor(len(runs), thread_name_prefix="window-run") as pool:
            outcomes = {name: pool.submit(run) for name, run in runs.items()}
        return Window(outcomes, records)

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if keep(record):
                records.append(f"{record.name}: {record.getMessage()}")

    handler = Collect(level)
    log = logging.getLogger(logger)
    previous = log.level
    if log.getEffectiveLevel() > level:
        log.setLevel(level)
    log.addHandler(handler)
    try:
        with ThreadPoolExecutor(len(runs), thread_name_prefix="window-run") as pool:
            outcomes = {name: pool.submit(run) for name, run in runs.items()}
        # (leaving the with-block waited for every run)
    finally:
        log.removeHandler(handler)
        log.setLevel(previous)
    return Window(outcomes, records)

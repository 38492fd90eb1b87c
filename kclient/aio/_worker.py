"""The thread that owns one synchronous client on behalf of an event loop.

kclient's KafkaConsumer and KafkaProducer are used by one thread at a time and block in
network I/O. Each asyncio client owns one ``Worker``: coroutines submit calls to it and await
their results as asyncio futures, so the event loop never waits for the network.

Jobs run in the order submitted. A job may need the loop in turn (a rebalance listener that
is a coroutine): ``run_on_loop`` runs it there and, while waiting, keeps running the jobs the
loop submits meanwhile (the listener's ``await consumer.commit()``), except fetches, which
wait until the listener is done (a fetch inside a rebalance would poll inside the poll).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import queue
import threading
from typing import Any, Callable

__all__ = ["Worker"]

log = logging.getLogger(__name__)


class _Job:
    __slots__ = ("fn", "args", "future", "seq", "fetch")

    def __init__(self, fn: Callable[..., Any], args: tuple, seq: int, fetch: bool):
        self.fn = fn
        self.args = args
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.seq = seq
        self.fetch = fetch


_STOP = object()   # ends the thread
_WAKE = object()   # a loop-side wait in run_on_loop finished


class Worker:
    def __init__(self, name: str, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._seq = 0
        #: The highest sequence number of a non-fetch job that has run: every such job
        #: submitted up to it has run (they run in order), which lets the loop tell fetch
        #: results from before a seek from those after it.
        self.seq_done = 0
        #: Optional work between jobs: called when no job is queued; True if it did some
        #: (it must return soon), False to wait for the next job.
        self.idle: Callable[[], bool] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = loop.create_future()
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    # ------------------------------------------------------------------ loop side
    def post(self, fn: Callable[..., Any], *args: Any, fetch: bool = False) -> _Job:
        """Queue ``fn(*args)`` to run on the worker; the job's ``future`` has its outcome."""
        self._seq += 1
        job = _Job(fn, args, self._seq, fetch)
        self._queue.put(job)
        return job

    def call(self, fn: Callable[..., Any], *args: Any, fetch: bool = False) -> "asyncio.Future[Any]":
        """``fn(*args)`` on the worker, as an asyncio future (cancelling it before the job
        starts keeps the job from running)."""
        return asyncio.wrap_future(self.post(fn, *args, fetch=fetch).future, loop=self._loop)

    async def stop(self) -> None:
        """End the thread after the jobs already queued; returns once it has ended."""
        self._queue.put(_STOP)
        await asyncio.shield(self._stopped)

    def stop_nowait(self) -> None:
        """End the thread after the jobs already queued, without waiting (any thread)."""
        self._queue.put(_STOP)

    # ------------------------------------------------------------------ worker side
    def _run(self) -> None:
        try:
            while True:
                job = self._next_job()
                if job is _STOP:
                    return
                if job is not _WAKE:
                    self._execute(job)
        finally:
            try:
                self._loop.call_soon_threadsafe(self._set_stopped)
            except RuntimeError:  # the loop is closed: nobody waits
                pass

    def _next_job(self) -> Any:
        idle = self.idle
        while idle is not None:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                try:
                    if not idle():
                        break
                except Exception:
                    log.exception("background work of %s failed", self._thread.name)
                    break
        return self._queue.get()

    def _set_stopped(self) -> None:
        if not self._stopped.done():
            self._stopped.set_result(None)

    def _execute(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            result = job.fn(*job.args)
        except BaseException as exc:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)
        finally:
            if not job.fetch and job.seq > self.seq_done:
                self.seq_done = job.seq

    def run_on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the event loop (awaiting it if it returns an awaitable) and
        return its result, from the worker thread; the loop's jobs keep running meanwhile."""
        if threading.current_thread() is not self._thread:
            raise RuntimeError("run_on_loop() is for the worker thread only")

        async def call() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        done = asyncio.run_coroutine_threadsafe(call(), self._loop)
        done.add_done_callback(lambda _: self._queue.put(_WAKE))
        held: list[Any] = []
        try:
            while not done.done():
                job = self._queue.get()
                if job is _WAKE:
                    continue
                if job is _STOP or job.fetch:
                    held.append(job)
                else:
                    self._execute(job)
        finally:
            for job in held:
                self._queue.put(job)
        return done.result()

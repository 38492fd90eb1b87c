"""AIOKafkaProducer: aiokafka's producer over kclient's KafkaProducer.

kclient's producer has no background thread: its network runs inside its calls. Here it is
owned by a worker thread, which drives it (in short polls) while records await their
answers, and otherwise runs the loop's calls. ``await send()`` returns once the record is
queued, with an asyncio future of its RecordMetadata, as in aiokafka.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

from kclient import errors as Errors
from kclient.aio._settings import bind_token_provider, producer_settings
from kclient.aio._worker import Worker
from kclient.config import ProducerConfig
from kclient.producer import KafkaProducer

__all__ = ["AIOKafkaProducer", "BatchBuilder"]

log = logging.getLogger(__name__)

#: How long one network poll of the worker lasts while records await answers: the longest a
#: call from the loop waits for its turn then.
_DRIVE_MS = 5

BatchMetadata = collections.namedtuple("BatchMetadata", ["offset", "size", "timestamp", "crc"])


class BatchBuilder:
    """Records for one partition, collected by the application and sent by ``send_batch()``."""

    def __init__(self, batch_size: int):
        self._batch_size = batch_size
        self._records: list[tuple[int | None, Any, Any, list]] = []
        self._size = 0
        self._closed = False

    def append(self, *, timestamp: float | None, key: Any, value: Any, headers: Any = ()) -> BatchMetadata | None:
        """Add a record (timestamp in seconds, None: now); None if the batch is full or closed."""
        if key is None and value is None:
            raise ValueError("key and value may not both be None")
        if self._closed:
            return None
        size = (len(key) if isinstance(key, (bytes, bytearray)) else 0) + \
            (len(value) if isinstance(value, (bytes, bytearray)) else 0) + 16
        if self._records and self._size + size > self._batch_size:
            return None
        ts_ms = None if timestamp is None else int(timestamp * 1000)
        self._records.append((ts_ms, key, value, list(headers or ())))
        self._size += size
        return BatchMetadata(len(self._records) - 1, size, ts_ms if ts_ms is not None else int(time.time() * 1000), None)

    def size(self) -> int:
        return self._size

    def record_count(self) -> int:
        return len(self._records)

    def close(self) -> None:
        self._closed = True


class AIOKafkaProducer:
    """aiokafka's AIOKafkaProducer (same keywords; differences in docs/asyncio.md)."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None, **configs: Any):
        self._settings = producer_settings(configs)
        config = ProducerConfig(self._settings)  # fails here if bad
        self._batch_size = max(config["batch.size"], 1)
        self._loop = loop
        self._worker: Worker | None = None
        self._producer: KafkaProducer | None = None
        self._pending = 0            # records sent and not answered (worker thread only)
        self._closed = False

    async def start(self) -> None:
        """Connect to the cluster (on the worker thread)."""
        if self._closed:
            raise Errors.ProducerClosed("the producer was stopped; make a new one")
        if self._worker is not None:
            return
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("the producer was made for another event loop")
        self._loop = loop
        worker = self._worker = Worker("kclient-aio-producer", loop)
        worker.idle = self._drive   # the worker polls the network while answers are due
        try:
            self._producer = await worker.call(lambda: KafkaProducer(**bind_token_provider(self._settings, loop)))
        except BaseException:
            self._worker = None
            await worker.stop()
            raise

    def _drive(self) -> bool:
        """Worker side, between jobs: poll the network briefly if records await answers."""
        producer = self._producer
        if producer is None or self._pending <= 0:
            return False
        producer.poll(_DRIVE_MS)
        return True

    async def stop(self) -> None:
        """Send what is queued, wait for the answers, close the connections."""
        if self._closed:
            return
        self._closed = True
        worker, producer = self._worker, self._producer
        if worker is None or producer is None:
            return
        try:
            await worker.call(producer.close)
        finally:
            await worker.stop()

    def __del__(self) -> None:
        # Never stopped: close the synchronous producer on its own thread (it sends what is
        # queued, briefly, as kclient's producer does when dropped).
        worker, producer = getattr(self, "_worker", None), getattr(self, "_producer", None)
        if worker is not None and producer is not None and not self._closed:
            self._closed = True
            worker.post(producer.close, 5)
            worker.stop_nowait()

    async def __aenter__(self) -> "AIOKafkaProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def _check_started(self) -> tuple[Worker, KafkaProducer]:
        if self._closed:
            raise Errors.ProducerClosed("the producer was stopped")
        if self._worker is None or self._producer is None:
            raise Errors.IllegalStateError("start() the producer first")
        return self._worker, self._producer

    def _send_on_worker(self, producer: KafkaProducer, done: asyncio.Future, args: tuple) -> None:
        topic, value, key, partition, timestamp_ms, headers = args
        sent = producer.send(topic, value=value, key=key, headers=headers, partition=partition,
                             timestamp_ms=timestamp_ms)
        self._pending += 1
        loop = self._loop
        assert loop is not None

        def settle(result: Any = None, exc: BaseException | None = None) -> None:
            self._pending -= 1
            try:
                loop.call_soon_threadsafe(_settle, done, result, exc)
            except RuntimeError:   # the loop is closed
                pass

        sent.add_callback(lambda metadata: settle(metadata))
        sent.add_errback(lambda exc: settle(None, exc))

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Any = None) -> asyncio.Future:
        """Queue a record; returns a future of its RecordMetadata."""
        worker, producer = self._check_started()
        assert self._loop is not None
        done = self._loop.create_future()
        await worker.call(self._send_on_worker, producer, done,
                          (topic, value, key, partition, timestamp_ms, list(headers) if headers else None))
        return done

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                            timestamp_ms: int | None = None, headers: Any = None) -> Any:
        """Send a record and wait for its RecordMetadata."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def flush(self) -> None:
        """Wait until every record sent so far is answered."""
        worker, producer = self._check_started()
        await worker.call(producer.flush)

    async def partitions_for(self, topic: str) -> set[int]:
        worker, producer = self._check_started()
        return await worker.call(producer.partitions_for, topic)

    def create_batch(self) -> BatchBuilder:
        """An empty batch to fill with ``append()`` and send with ``send_batch()``."""
        return BatchBuilder(self._batch_size)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future:
        """Send a batch's records to one partition; returns a future of the RecordMetadata of
        its first record (set once all of them are answered)."""
        futures = [await self.send(topic, value, key, partition, ts, headers)
                   for ts, key, value, headers in batch._records]
        batch.close()
        assert self._loop is not None
        done = self._loop.create_future()

        def first(gathered: asyncio.Future) -> None:
            if gathered.cancelled():
                done.cancel()
            elif gathered.exception() is not None:
                done.set_exception(gathered.exception())  # type: ignore[arg-type]
            else:
                done.set_result(gathered.result()[0] if gathered.result() else None)

        asyncio.gather(*futures).add_done_callback(first)
        return done


def _settle(done: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if done.done():
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)

"""Parallel record handling: more handler threads than partitions, with safe commits (mechanisms §9).

    from kclient import KafkaConsumer
    from kclient.parallel import ParallelConsumer

    consumer = KafkaConsumer("orders", bootstrap_servers=..., group_id="billing",
                             enable_auto_commit=False)
    with ParallelConsumer(consumer, max_workers=64, ordering="key") as pc:
        pc.run(handle, stop=stop_event)       # handle(record) runs on worker threads

Modules, one job each: ``scheduler`` (ordering rules, task queues), ``offsets`` (the
committable contiguous prefix per partition), ``backpressure`` (when to pause fetching),
``workers`` (handler threads, retries, on_error), ``rebalance`` (the listener hook),
``driver`` (the polling loop and commits), ``share_driver`` (the same on a share group:
``ParallelConsumer(share_consumer, ...)``), ``metrics``, ``settings``. See docs/parallel.md.
"""
from __future__ import annotations

from kclient.parallel.driver import ParallelConsumer
from kclient.parallel import share_driver  # noqa: F401  (registers ParallelConsumer's share-group flavour)
from kclient.parallel.metrics import ParallelMetrics, PartitionMetrics, ShareParallelMetrics
from kclient.parallel.workers import HandlerError

__all__ = ["HandlerError", "ParallelConsumer", "ParallelMetrics", "PartitionMetrics", "ShareParallelMetrics"]

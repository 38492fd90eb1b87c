"""Fetcher: what KafkaConsumer fetches through, composed of one component per job.

- ``FetchRequests`` (fetch_requests.py) builds each broker's Fetch requests with their fetch
  sessions, sends them, and turns the answers into buffered answers or partition errors;
- ``FetchBuffer`` (fetch_buffer.py) holds the answered fetches, each partition's pipeline
  state and the memory bound;
- ``FetchCollector`` (fetch_collector.py) drains the buffer into records or columns;
- ``FetchConfig`` (fetch_config.py) is their settings.
"""
from __future__ import annotations

import collections

from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.consumer.fetch_buffer import FetchBuffer
from kclient.consumer.fetch_collector import FetchCollector
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetch_requests import FetchRequests
from kclient.consumer.fetch_session import FetchSessionHandler
from kclient.subscription.state import SubscriptionState

__all__ = ["Fetcher"]


class Fetcher:
    """Sends fetches and hands out their records (mechanisms §7)."""

    def __init__(self, client, subscriptions: SubscriptionState, config: FetchConfig, *,
                 clock: Clock | None = None, metrics: collections.Counter | None = None, stats=None):
        if not isinstance(config, FetchConfig):
            raise TypeError(f"Fetcher takes a FetchConfig (FetchConfig.of(settings)), not {type(config).__name__}")
        clock = clock or SYSTEM_CLOCK
        metrics = metrics if metrics is not None else collections.Counter()
        self.buffer = FetchBuffer(subscriptions, config.max_bytes)
        self.requests = FetchRequests(client, subscriptions, self.buffer, config, clock=clock, metrics=metrics,
                                      stats=stats)
        self.collector = FetchCollector(self.buffer, subscriptions, client.metadata, config, clock=clock,
                                        metrics=metrics, stats=stats)
        # What every poll calls is the component's own bound method: no layer in between.
        self.send_fetches = self.requests.send_fetches
        self.fetched_records = self.collector.fetched_records
        self.fetched_columnar = self.collector.fetched_columnar
        self.has_completed_fetches = self.buffer.has_completed_fetches
        self.has_available_fetches = self.buffer.has_available_fetches
        # Through FetchRequests: a cleared partition is a change its next requests go by.
        self.clear_partition = self.requests.clear_partition
        self.clear_all = self.requests.clear_all
        self.preferred_read_replica = self.requests.preferred_read_replica

    @property
    def sends_blocked(self) -> bool:
        """The last send_fetches had fetches to send but a leader was not ready (connecting,
        or a metadata refresh is due first): only a network poll moves that on."""
        return self.requests.sends_blocked

    @property
    def buffered_bytes(self) -> int:
        """Bytes kept alive by buffered answers: their response frames and the receive
        thread's arrays for the frames' records."""
        return self.buffer.buffered_bytes

    @property
    def in_flight_fetches(self) -> int:
        return self.requests.in_flight_fetches

    @property
    def fetch_sessions(self) -> dict[tuple[int, int], FetchSessionHandler]:
        """{(node id, slot): its fetch session}: for tests and metrics."""
        return self.requests.sessions

    def close(self) -> None:
        self.buffer.close()
        self.requests.close()

"""A scripted stand-in for the share consumer's network client (no broker): one topic, "orders",
led by node 1, and the ShareFetch answers a test hands to the requests it sent."""
from __future__ import annotations

import uuid

from kcore.records import encode_batch

from kclient.network.future import RequestFuture
from kclient.network.metadata import Node

TID = uuid.uuid4()
LEADER = Node(1, "127.0.0.1", 9092)


class FakeCluster:
    def topic_id(self, topic):
        return TID if topic == "orders" else None

    def topic_name(self, tid):
        return "orders" if tid == TID else None

    def leader_for(self, tp):
        return LEADER


class FakeMetadata:
    cluster = FakeCluster()
    updates = 0

    def request_update(self):
        self.updates += 1


class FakeClient:
    """Keeps every request sent, with the future a test completes as the broker's answer."""

    def __init__(self):
        self.metadata = FakeMetadata()
        self.sent: list[tuple[int, int, dict, RequestFuture]] = []
        self.unavailable: set[int] = set()      # nodes in reconnect backoff

    def is_unavailable(self, node):
        return node in self.unavailable

    def send(self, node, api, body):
        f: RequestFuture = RequestFuture()
        self.sent.append((node, api, body, f))
        return f


def records_bytes(base: int, n: int) -> bytes:
    return encode_batch([(None, 1000 + i, None, f"v{base + i}".encode(), []) for i in range(n)], base_offset=base)


def fetch_answer(partitions, error=0, lock=15000):
    return {"throttle_time_ms": 0, "error_code": error, "error_message": None,
            "acquisition_lock_timeout_ms": lock, "node_endpoints": [],
            "responses": [{"topic_id": TID, "partitions": partitions}]}


def part(index, records=None, acquired=(), error=0, ack_error=0):
    return {"partition_index": index, "error_code": error, "error_message": None,
            "acknowledge_error_code": ack_error, "acknowledge_error_message": None,
            "current_leader": {"leader_id": 1, "leader_epoch": 0}, "records": records,
            "acquired_records": [{"first_offset": f, "last_offset": la, "delivery_count": d}
                                 for f, la, d in acquired]}

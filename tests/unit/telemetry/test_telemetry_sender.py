"""The KIP-714 state machine against a fake network client and a fake clock: subscription,
pushes at the interval, re-subscription, a broker without the APIs, the terminating push."""
from __future__ import annotations

import logging
import uuid

from otlp_reader import decode_metrics_data

from kclient.clock import FakeClock
from kclient.network.connection import ConnectionState
from kclient.telemetry.points import TelemetryPoints
from kclient.telemetry.sender import DISABLED, PUSH_NEEDED, TERMINATED, TelemetrySender

INSTANCE = uuid.UUID("12345678-1234-5678-1234-567812345678")


class FakeHost:
    """The parts of NetworkClient the sender uses; requests are kept for the test to answer."""

    def __init__(self, apis=(71, 72)):
        self.clock = FakeClock()
        self.apis = set(apis)
        self.sent = []

    def connection_state(self, node):
        return ConnectionState.READY

    def least_loaded_node(self, now_ms=None):
        return 1

    def ready(self, node, now_ms=None):
        return True

    def send_capacity(self, node):
        return 5

    def api_version(self, node, key):
        return 0 if key in self.apis else None

    def send(self, request, now_ms=None):
        self.sent.append(request)

    def answer(self, response=None, error=None):
        request = self.sent[-1]
        request.callback(response, error)
        return request

    def poll(self, timeout_ms):
        self.clock.advance(timeout_ms)


def subscription(metrics=("org.apache.kafka.consumer.",), interval=1000, code=0, delta=True):
    return {"error_code": code, "client_instance_id": INSTANCE, "subscription_id": 7,
            "accepted_compression_types": [3], "push_interval_ms": interval, "telemetry_max_bytes": 1 << 20,
            "delta_temporality": delta, "requested_metrics": list(metrics)}


def sender():
    values = {"consumer-coordinator-metrics": {"join-total": 1, "join-rate": 0.5}}
    kinds = {("consumer-coordinator-metrics", "join-total"): "sum", ("consumer-coordinator-metrics", "join-rate"): "gauge"}
    return TelemetrySender(TelemetryPoints(lambda: values, 0, kinds), lambda: [("group_id", "g")], clock_ns=lambda: 10)


def test_subscribes_then_pushes_at_the_interval(caplog):
    caplog.set_level(logging.DEBUG, "kclient.telemetry")
    host, s = FakeHost(), sender()
    s.poll(host, host.clock.now_ms())
    req = host.answer(subscription())
    assert req.api_key == 71 and req.body["client_instance_id"] == uuid.UUID(int=0)
    assert s.instance_id == INSTANCE and s.state == PUSH_NEEDED
    first = s.poll(host, host.clock.now_ms())        # the first push waits 0.5-1.5 intervals
    assert 500 <= first - host.clock.now_ms() <= 1500 and len(host.sent) == 1
    host.clock.advance(first - host.clock.now_ms())
    s.poll(host, host.clock.now_ms())
    push = host.sent[-1]
    assert push.api_key == 72 and push.body["subscription_id"] == 7 and not push.body["terminating"]
    assert push.body["client_instance_id"] == INSTANCE and push.body["compression_type"] == 0
    resource, metrics = decode_metrics_data(push.body["metrics"])
    assert resource == {"group_id": "g"}
    assert {m.name for m in metrics} == {"org.apache.kafka.consumer.coordinator.join.total",
                                         "org.apache.kafka.consumer.coordinator.join.rate"}
    host.answer({"error_code": 0})
    assert s.poll(host, host.clock.now_ms()) == host.clock.now_ms() + 1000
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]


def test_no_requested_metrics_means_no_push_and_asking_again_later():
    host, s = FakeHost(), sender()
    s.poll(host, host.clock.now_ms())
    host.answer(subscription(metrics=(), interval=5000))
    assert s.poll(host, host.clock.now_ms()) == host.clock.now_ms() + 5000 and len(host.sent) == 1
    host.clock.advance(5000)
    s.poll(host, host.clock.now_ms())
    assert [r.api_key for r in host.sent] == [71, 71]
    assert host.sent[-1].body["client_instance_id"] == INSTANCE     # the id the broker gave is kept


def test_a_broker_without_the_apis_disables_the_sender_silently(caplog):
    caplog.set_level(logging.DEBUG)
    host, s = FakeHost(apis=()), sender()
    s.poll(host, host.clock.now_ms())
    assert s.state == DISABLED and host.sent == []
    assert not s.initiate_close()
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]


def test_unknown_subscription_asks_again_at_once():
    host, s = FakeHost(), sender()
    s.poll(host, host.clock.now_ms())
    host.answer(subscription(interval=100))
    host.clock.advance(200)
    s.poll(host, host.clock.now_ms())
    host.answer({"error_code": 117})          # UNKNOWN_SUBSCRIPTION_ID
    s.poll(host, host.clock.now_ms())
    assert [r.api_key for r in host.sent] == [71, 72, 71]


def test_close_sends_a_terminating_push_and_waits_for_its_answer():
    host, s = FakeHost(), sender()
    s.poll(host, host.clock.now_ms())
    host.answer(subscription(interval=60000))

    def poll(timeout_ms):            # the network client's poll drives the sender
        s.poll(host, host.clock.now_ms())
        if host.sent[-1].api_key == 72 and s.state != TERMINATED:
            host.answer({"error_code": 0})
    host.poll = poll
    s.close(host, 5000)
    assert s.state == TERMINATED and host.sent[-1].body["terminating"] is True


def test_close_before_any_subscription_sends_nothing():
    host, s = FakeHost(), sender()
    s.close(host, 5000)
    assert s.state == TERMINATED and host.sent == []


def test_close_without_a_ready_connection_does_not_wait():
    host, s = FakeHost(), sender()
    s.poll(host, host.clock.now_ms())
    host.answer(subscription(interval=60000))
    host.connection_state = lambda node: ConnectionState.DISCONNECTED

    def poll(timeout_ms):            # the network client's poll drives the sender
        s.poll(host, host.clock.now_ms())
        host.clock.advance(timeout_ms)
    host.poll = poll
    start = host.clock.now_ms()
    s.close(host, 5000)
    assert s.state == TERMINATED and host.clock.now_ms() - start <= 100
    assert [r.api_key for r in host.sent] == [71]

"""An idle, connected client sleeps in select() instead of spinning.

The bound (0.05 s of CPU over 5 s of polling) is a behaviour check with a wide margin, not
a speed figure: a client that woke up every millisecond, or busy-looped, would burn seconds.
The mock cluster runs in a child process, so only the client's CPU is counted.
"""
from __future__ import annotations

import math
import time

import psutil

from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig

IDLE_SECONDS = 5.0
CPU_BOUND_S = 0.05


def test_idle_connected_client_uses_almost_no_cpu(mock_cluster):
    cnc = ConsumerNetworkClient(config=NetworkClientConfig.of({"bootstrap.servers": mock_cluster.bootstrap}))
    try:
        cnc.ensure_bootstrapped(10_000)
        node = cnc.least_loaded_node()
        deadline = time.monotonic() + 10
        while not cnc.try_connect(node):
            assert time.monotonic() < deadline, "could not connect"
            cnc.poll(100)
        proc = psutil.Process()
        before = proc.cpu_times()
        start = time.monotonic()
        end = start + IDLE_SECONDS
        polls = 0
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            # Rounded up: truncating 0.9 ms to 0 ended the loop just short of IDLE_SECONDS.
            cnc.poll(min(math.ceil(remaining * 1000), 1000))   # the loop an application would run
            polls += 1
        after = proc.cpu_times()
        cpu = (after.user - before.user) + (after.system - before.system)
        assert time.monotonic() - start >= IDLE_SECONDS
        assert cnc.client.is_ready(node)        # still connected: idle, not disconnected
        assert polls <= 10, f"{polls} polls: the client returned early instead of sleeping"
        assert cpu < CPU_BOUND_S, f"{cpu:.3f} s CPU in {IDLE_SECONDS} s of idle polling"
    finally:
        cnc.close()

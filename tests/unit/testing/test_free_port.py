"""The harness's port picker: ports below the OS's ephemeral range (which outgoing connections
take their local ports from), bindable, and reserved against the machine's other harness
processes for a while."""
from __future__ import annotations

import socket

import pytest

from kclient.testing import _base


def test_ports_come_from_below_the_ephemeral_range_and_are_bindable():
    low = _base._ephemeral_low()
    if low is None:
        pytest.skip("this OS does not say which ports it gives outgoing connections")
    ports = [_base.free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert all(low - _base._RESERVED_SPAN <= p < low for p in ports), ports
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[0]))


def test_a_reserved_port_is_not_handed_out_again(monkeypatch, tmp_path):
    monkeypatch.setattr(_base.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(_base, "_ephemeral_low", lambda: 40_000)
    picks = iter([30_001, 30_001, 30_002])
    monkeypatch.setattr(_base.random.SystemRandom, "randrange", lambda self, a, b: next(picks))
    monkeypatch.setattr(_base, "_bindable", lambda host, port: True)
    assert _base.free_port() == 30_001
    assert _base.free_port() == 30_002      # 30_001 is still reserved


def test_a_stale_reservation_is_taken_over(monkeypatch, tmp_path):
    monkeypatch.setattr(_base.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(_base, "_ephemeral_low", lambda: 40_000)
    monkeypatch.setattr(_base.random.SystemRandom, "randrange", lambda self, a, b: 30_005)
    monkeypatch.setattr(_base, "_bindable", lambda host, port: True)
    assert _base.free_port() == 30_005
    now = _base.time.time()
    monkeypatch.setattr(_base.time, "time", lambda: now + _base._RESERVATION_S + 1)
    assert _base.free_port() == 30_005


def test_a_port_in_use_is_skipped(monkeypatch, tmp_path):
    monkeypatch.setattr(_base.tempfile, "gettempdir", lambda: str(tmp_path))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        spare = probe.getsockname()[1]          # free again once the probe is closed
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(_base, "_ephemeral_low", lambda: 60_000)
        picks = iter([taken, spare])
        monkeypatch.setattr(_base.random.SystemRandom, "randrange", lambda self, a, b: next(picks))
        got = _base.free_port()
    assert got == spare

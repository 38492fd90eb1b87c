"""What every harness cluster (Tansu, mock, external) shares: errors, ports, topic checks."""
from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from typing import TYPE_CHECKING

from kclient.errors import for_code
from kclient.testing import _wire

__all__ = ["HarnessError", "BrokerNotFoundError", "BrokerStartError", "FaultInjectionUnavailable",
           "free_port", "ClusterBase"]


class HarnessError(RuntimeError):
    """A test broker could not be started, driven or stopped."""


class BrokerNotFoundError(HarnessError):
    """The broker binary or library is not installed."""


class BrokerStartError(HarnessError):
    """The broker process started but did not become ready (its log tail is in the message)."""


class FaultInjectionUnavailable(HarnessError):
    """The cluster cannot inject faults (only the librdkafka mock cluster can)."""


#: Ports handed out stay reserved for other harness processes this long (seconds): enough for
#: a broker to start and bind them; after it the port's own bind check decides.
_RESERVATION_S = 300.0
_RESERVED_SPAN = 12_000      # ports below the ephemeral range the harness picks from


def _ephemeral_low() -> int | None:
    """The first port of the range the OS picks outgoing connections' local ports (and bind(0)
    ports) from, where it says (Linux); None elsewhere."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _reserve(port: int) -> bool:
    """Claim ``port`` for this process against the other harness processes of this machine
    (the two test workers): a file per port, created exclusively; an old one is stale."""
    folder = os.path.join(tempfile.gettempdir(), f"kclient-ports-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, str(port))
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if time.time() - os.path.getmtime(path) < _RESERVATION_S:
                return False
            os.utime(path)               # stale: take it over
            return True
        except OSError:
            return False
    os.close(fd)
    return True


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A free port for a test broker to listen on. Where the OS says which range it takes
    outgoing connections' local ports from, the port comes from just below that range: a port
    of the range itself, free a moment ago, could be given to any client's connection before
    the broker (which binds it seconds later) does. Ports handed out are reserved for a while
    against the other harness processes of the machine. Elsewhere: a port the OS picks."""
    low = _ephemeral_low()
    if low is not None and low - _RESERVED_SPAN >= 1024:
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randrange(low - _RESERVED_SPAN, low)
            if _bindable(host, port) and _reserve(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def log_tail(path, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return "(no log)"


class ClusterBase:
    """Topic helpers on top of ``bootstrap`` that work on any Kafka-protocol cluster, and the
    context-manager protocol (``with Cluster() as c``: start, then stop)."""

    if TYPE_CHECKING:
        # Each cluster provides it, as a property or a plain attribute; read-only here so both fit.
        @property
        def bootstrap(self) -> str: ...

    def start(self):
        raise NotImplementedError

    def stop(self, timeout: float = 10.0) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        self._delete_topic_request(name, timeout)

    def metadata(self, topics: list[str] | None = None, timeout: float = 10.0) -> dict:
        with _wire.RawConnection.to(self.bootstrap, timeout) as conn:
            return _wire.metadata(conn, topics)

    def wait_for_topic(self, name: str, partitions: int, timeout: float = 10.0) -> dict:
        """Wait until Metadata shows ``name`` with ``partitions`` partitions, all with a leader."""
        def ready():
            topic = self.metadata([name])["topics"].get(name)
            if not topic or topic["error_code"] != 0 or len(topic["partitions"]) != partitions:
                return None
            if any(p["leader_id"] < 0 for p in topic["partitions"].values()):
                return None
            return topic
        return _wire.wait_until(ready, timeout, f"topic {name!r} with {partitions} partitions")

    def _create_topic_request(self, name: str, partitions: int, replication_factor: int,
                              configs: dict[str, str] | None, timeout: float) -> None:
        with _wire.RawConnection.to(self.bootstrap, timeout) as conn:
            ((_, code, message),) = _wire.create_topics(
                conn, [(name, partitions, replication_factor, dict(configs or {}))], int(timeout * 1000))
        _raise(code, f"create topic {name!r}: {message or ''}".rstrip(": "))

    def _delete_topic_request(self, name: str, timeout: float) -> None:
        with _wire.RawConnection.to(self.bootstrap, timeout) as conn:
            ((_, code),) = _wire.delete_topics(conn, [name], int(timeout * 1000))
        _raise(code, f"delete topic {name!r}")


def _raise(code: int, message: str) -> None:
    cls = for_code(code)
    if cls is not None:
        err = cls(message)
        if err.errno is None:
            err.errno = code
        raise err

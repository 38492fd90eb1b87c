"""What every harness cluster (Tansu, mock, external) shares: errors, ports, topic checks."""
from __future__ import annotations

import socket
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


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago; the caller retries if someone takes it meanwhile."""
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

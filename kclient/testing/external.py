"""A cluster someone else runs (``KCLIENT_TEST_BOOTSTRAP=host:port``), e.g. Apache Kafka."""
from __future__ import annotations

from kclient.testing._base import ClusterBase, FaultInjectionUnavailable

__all__ = ["ExternalCluster"]


class ExternalCluster(ClusterBase):
    """Same topic API as TansuBroker/MockCluster; start/stop do nothing; no fault injection."""

    kind = "external"
    supports_fault_injection = False
    pid = None
    running = True
    bootstrap: str

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def start(self) -> "ExternalCluster":
        return self

    def stop(self, timeout: float = 10.0) -> None:
        pass

    def __repr__(self) -> str:
        return f"<ExternalCluster bootstrap={self.bootstrap}>"

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, *,
                     configs: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        self._create_topic_request(name, partitions, replication_factor, configs, timeout)
        return name


    def __getattr__(self, name: str):
        # Fault-injection methods of MockCluster: fail with a reason instead of AttributeError.
        if name.startswith(("broker_", "push_", "partition_", "coordinator_", "set_", "clear_",
                            "start_request", "stop_request", "get_requests", "delete_records",
                            "group_")):
            raise FaultInjectionUnavailable(
                f"{name}: KCLIENT_TEST_BOOTSTRAP points at an external cluster ({self.bootstrap}); "
                "fault injection needs the librdkafka mock cluster")
        raise AttributeError(name)

"""Typed public API of kcore.pacemaker: the GIL-free heartbeat loop."""
from kcore.timers import Heartbeat
from kcore.tls import TlsContext

__all__ = [
    "Pacemaker", "MAX_HEARTBEAT_VERSION", "MAX_LEAVE_GROUP_VERSION", "MAX_CONSUMER_GROUP_HEARTBEAT_VERSION",
    "MAX_SHARE_GROUP_HEARTBEAT_VERSION", "EV_HEARTBEAT_ERROR", "EV_COORDINATOR_LOST", "EV_POLL_TIMEOUT", "EV_DISCONNECTED", "EV_ASSIGNMENT",
    "CODE_SESSION_EXPIRED", "CODE_NOT_SENT", "CODE_CONNECT_FAILED",
]

MAX_HEARTBEAT_VERSION: int
MAX_LEAVE_GROUP_VERSION: int
MAX_CONSUMER_GROUP_HEARTBEAT_VERSION: int
MAX_SHARE_GROUP_HEARTBEAT_VERSION: int
EV_HEARTBEAT_ERROR: int
EV_COORDINATOR_LOST: int
EV_POLL_TIMEOUT: int
EV_DISCONNECTED: int
EV_ASSIGNMENT: int
CODE_SESSION_EXPIRED: int
CODE_NOT_SENT: int
CODE_CONNECT_FAILED: int

#: (kind, code, epoch, generation, at_ms, detail)
Event = tuple[int, int, int, int, int, int]

class Pacemaker:
    epoch: int
    def __init__(self, heartbeat: Heartbeat, client_id: str | None = None) -> None: ...
    def configure(self, *, host: str, port: int, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None, heartbeat_version: int,
                  leave_group_version: int | None = None, request_timeout_ms: int = 30000) -> int: ...
    def configure_consumer(self, *, host: str, port: int, group_id: str, member_id: str, member_epoch: int,
                           group_instance_id: str | None = None, version: int,
                           request_timeout_ms: int = 30000) -> int:
        """KIP-848 ConsumerGroupHeartbeat mode; the loop advances the member epoch."""
    def configure_share(self, *, host: str, port: int, group_id: str, member_id: str, member_epoch: int,
                        version: int, request_timeout_ms: int = 30000) -> int:
        """KIP-932 ShareGroupHeartbeat mode; the loop advances the member epoch, never leaves."""
    def set_security(self, *, tls: TlsContext | None = None, sasl_mechanism: str | None = None,
                     username: str | None = None, password: str | None = None,
                     sasl_authenticate_version: int = 0) -> None: ...
    def set_sasl_authenticate_version(self, version: int) -> None: ...
    def set_sasl_token(self, token: str, extensions: dict[str, str] | None = None) -> None: ...
    @property
    def last_error(self) -> str: ...
    def deactivate(self) -> int: ...
    def close(self) -> None: ...
    def wake(self) -> None: ...
    def run(self) -> None: ...
    def take_events(self) -> list[Event]: ...
    def wait_events(self, timeout_ms: int) -> list[Event]: ...
    @property
    def is_running(self) -> bool: ...
    @property
    def is_active(self) -> bool: ...
    @property
    def member_epoch(self) -> int: ...
    def take_assignment(self) -> tuple[int, int, bytes] | None:
        """(sequence, version, response frame) of the newest answer with an assignment, once."""
    def stats(self) -> dict[str, int]: ...
    def send_times_ms(self) -> list[int]: ...

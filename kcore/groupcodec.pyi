"""Typed public API of kcore.groupcodec: group heartbeat and LeaveGroup codec in C (for the GIL-free loop)."""
from typing import Any

__all__ = ["encode_heartbeat_request", "encode_leave_group_request", "decode_heartbeat_response",
           "decode_leave_group_response", "encode_consumer_group_heartbeat_request",
           "decode_consumer_group_heartbeat_response", "encode_share_group_heartbeat_request",
           "decode_share_group_heartbeat_response", "MAX_HEARTBEAT_VERSION", "MAX_LEAVE_GROUP_VERSION",
           "MAX_CONSUMER_GROUP_HEARTBEAT_VERSION", "MIN_SHARE_GROUP_HEARTBEAT_VERSION",
           "MAX_SHARE_GROUP_HEARTBEAT_VERSION"]

MAX_HEARTBEAT_VERSION: int
MAX_LEAVE_GROUP_VERSION: int
MAX_CONSUMER_GROUP_HEARTBEAT_VERSION: int
MIN_SHARE_GROUP_HEARTBEAT_VERSION: int
MAX_SHARE_GROUP_HEARTBEAT_VERSION: int

def encode_heartbeat_request(version: int, correlation_id: int, client_id: str | None, group_id: str,
                             generation_id: int, member_id: str,
                             group_instance_id: str | None = None) -> bytes:
    """Whole request frame, size prefix included."""
def encode_leave_group_request(version: int, correlation_id: int, client_id: str | None, group_id: str,
                               member_id: str, group_instance_id: str | None = None,
                               reason: str | None = None) -> bytes: ...
def decode_heartbeat_response(version: int, frame: Any) -> tuple[int, int, int]:
    """(correlation_id, throttle_time_ms, error_code) of a frame without its size prefix;
    ValueError names what is wrong (truncated, malformed, trailing bytes, version)."""
def decode_leave_group_response(version: int, frame: Any) -> tuple[int, int]:
    """(correlation_id, error_code): the top-level error, else the first member's."""
def encode_consumer_group_heartbeat_request(version: int, correlation_id: int, client_id: str | None,
                                            group_id: str, member_id: str, member_epoch: int,
                                            instance_id: str | None = None) -> bytes:
    """Short-form request frame (every field but group, member, epoch and instance id "unchanged")."""
def decode_consumer_group_heartbeat_response(version: int, frame: Any) -> tuple[int, int, int, int, int, bool]:
    """(correlation_id, throttle_time_ms, error_code, member_epoch, heartbeat_interval_ms,
    has_assignment); the assignment is validated, not returned."""
def encode_share_group_heartbeat_request(version: int, correlation_id: int, client_id: str | None,
                                         group_id: str, member_id: str, member_epoch: int) -> bytes:
    """Short-form request frame (rack and subscription null: unchanged)."""
def decode_share_group_heartbeat_response(version: int, frame: Any) -> tuple[int, int, int, int, int, bool]:
    """(correlation_id, throttle_time_ms, error_code, member_epoch, heartbeat_interval_ms,
    has_assignment); the assignment is validated, not returned."""

"""Per-group broker configs for tests: set them and wait until the broker shows them.

Share groups take their record lock duration, delivery count limit, offset reset and session
timeout from configs on the GROUP resource (IncrementalAlterConfigs, resource type 32). The
broker applies a change a moment after the call returns, so ``alter_group_configs`` then asks
DescribeConfigs until every value is there. Both requests are hand-encoded in their
non-flexible versions, like the rest of the harness's wire code (``kclient.testing._wire``).
"""
from __future__ import annotations

import struct

from kclient.testing import _wire
from kclient.testing._base import HarnessError

__all__ = ["alter_group_configs", "describe_group_configs", "GROUP_RESOURCE"]

GROUP_RESOURCE = 32
_INCREMENTAL_ALTER_CONFIGS, _DESCRIBE_CONFIGS = 44, 32
_SET = 0


def describe_group_configs(bootstrap: str, group_id: str, names: list[str] | None = None,
                           timeout: float = 10.0) -> dict[str, str | None]:
    """DescribeConfigs v1 of the group: {name: value}."""
    body = struct.pack(">i", 1) + struct.pack(">b", GROUP_RESOURCE) + _wire._string(group_id)
    if names is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(names)) + b"".join(_wire._string(n) for n in names)
    body += struct.pack(">b", 0)            # include_synonyms
    with _wire.RawConnection.to(bootstrap, timeout) as conn:
        r = conn.call(_DESCRIBE_CONFIGS, 1, body)
    r.i32()                                 # throttle_time_ms
    out: dict[str, str | None] = {}
    for _ in range(r.array_len()):
        error, message = r.i16(), r.string()
        r.i8()
        r.string()
        if error:
            raise HarnessError(f"DescribeConfigs of group {group_id}: error {error} ({message})")
        for _ in range(r.array_len()):
            name, value = r.name(), r.string()
            r.bool()                        # read_only
            r.i8()                          # config_source
            r.bool()                        # is_sensitive
            for _ in range(r.array_len()):  # synonyms
                r.string()
                r.string()
                r.i8()
            out[name] = value
    return out


def alter_group_configs(bootstrap: str, group_id: str, configs: dict[str, str], timeout: float = 30.0) -> None:
    """Set ``configs`` on the group and wait (up to ``timeout`` s) until DescribeConfigs shows them."""
    body = struct.pack(">i", 1) + struct.pack(">b", GROUP_RESOURCE) + _wire._string(group_id)
    body += struct.pack(">i", len(configs))
    for name, value in configs.items():
        body += _wire._string(name) + struct.pack(">b", _SET) + _wire._string(value)
    body += struct.pack(">b", 0)            # validate_only
    with _wire.RawConnection.to(bootstrap, timeout) as conn:
        r = conn.call(_INCREMENTAL_ALTER_CONFIGS, 0, body)
    r.i32()
    for _ in range(r.array_len()):
        error, message = r.i16(), r.string()
        if error:
            raise HarnessError(f"IncrementalAlterConfigs of group {group_id} {configs}: error {error} ({message})")
        r.i8()
        r.string()
    _wire.wait_until(lambda: all(describe_group_configs(bootstrap, group_id, sorted(configs)).get(name) == value
                                 for name, value in configs.items()),
                     timeout, f"group {group_id}'s configs {configs} to be visible")

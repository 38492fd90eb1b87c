"""The group layer: membership of a consumer group and partition assignment.

``AbstractCoordinator`` (join, sync, generations; mechanisms §5), ``HeartbeatThread`` (§1-§2),
``ConsumerCoordinator`` (assignors, commits, snapshots; §6), the consumer protocol's
subscription/assignment encodings and the assignors.
"""

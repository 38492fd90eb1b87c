"""The group layer: membership of a consumer group, partition assignment and offsets.

Both group protocols are built from the same parts, by composition:

- ``CoordinatorChannel`` (coordinator_channel): finding and reaching the group coordinator;
- ``OffsetCommitter`` (commit_manager): commits, committed offsets, auto-commit;
- a ``HeartbeatDriver`` (heartbeat_driver): the Python heartbeat thread, or the GIL-free
  pacemaker link that carries it (pacemaker, consumer_pacemaker over epoch_link).

``group.protocol=classic``: ``AbstractCoordinator`` (join, sync, generations; mechanisms §5)
and ``ConsumerCoordinator`` (assignors, snapshots; §6) with the embedded protocol's encodings
(classic_embedded_protocol) and the assignors. ``group.protocol=consumer`` (KIP-848):
``ConsumerGroupCoordinator`` over the ``ConsumerMembership`` state machine (§12). Both show
``KafkaConsumer`` the ``MemberCoordinator`` surface; their typed settings are in group_config.

This package imports nothing from kclient.consumer: what it shares with the consumer layer
(the subscription state, the rebalance listener) lives in kclient.subscription.
"""

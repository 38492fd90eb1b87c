"""What the consumer is subscribed to and what it owns: ``SubscriptionState`` (subscriptions,
assignments, positions, pause/resume) and the rebalance listener interface.

Shared by the consumer layer (fetching, positions) and the group layer (assignments): it
imports neither, so both can depend on it.
"""

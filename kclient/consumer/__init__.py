"""The consumer layer: ``KafkaConsumer`` (mechanisms §7) and what it is built from.

``Fetcher`` (pipelined fetches, record decoding), ``OffsetFetcher`` (offset lookups and
resets), ``SubscriptionState`` (subscriptions, assignments, positions), the columnar records,
deserializers, interceptors and the rebalance listener interface.
"""

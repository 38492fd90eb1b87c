"""The consumer layer: ``KafkaConsumer`` (mechanisms §7) and what it is built from.

``Fetcher`` (pipelined fetches, record decoding), ``OffsetFetcher`` (offset lookups and
resets), the columnar records, deserializers and interceptors. ``KafkaConsumer`` builds the
group layer's coordinator (kclient.group) and hands it the interceptors; the subscription
state and the rebalance listener interface, which both layers use, live in
kclient.subscription.
"""

"""The network layer: connections to brokers, requests in flight, futures, cluster metadata.

``NetworkClient`` (connections, in-flight requests, metadata refresh; mechanisms §11),
``ConsumerNetworkClient`` (unsent queue, delayed tasks, wakeups; §10), ``RequestFuture``,
``Metadata`` / ``Cluster`` and ``BrokerConnection``.
"""

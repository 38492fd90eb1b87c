"""The network layer: connections to brokers, requests in flight, futures, cluster metadata.

``NetworkClient`` (connections, in-flight requests, metadata refresh; mechanisms §11) with its
``NetworkClientConfig``, ``Authenticator`` (a connection's TLS, ApiVersions, SASL and KIP-368
re-authentication), ``ConsumerNetworkClient`` (unsent queue, delayed tasks, wakeups; §10),
``RequestFuture``, ``Metadata`` / ``Cluster`` and ``BrokerConnection``.
"""

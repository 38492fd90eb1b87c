"""The consumer's settings builder: one typed, immutable config per component.

``ConsumerConfig`` (``kclient.config``) is the consumer's table and a user's values checked
against it: name, type, range, default. ``ConsumerSettings.of(config)`` turns that into one
object per component, named as in the Java client, so that a component reads typed fields and
never a dotted key: ``NetworkClientConfig`` (NetworkClient), ``FetchConfig`` (Fetcher),
``GroupRebalanceConfig`` (AbstractCoordinator and its heartbeat) and
``ConsumerCoordinatorConfig`` (ConsumerCoordinator). KafkaConsumer builds them once and hands
each component its part; the producer and the admin client build their ``NetworkClientConfig``
from their own checked settings (``ProducerConfig``, ``AdminClientConfig``) the same way.

Checks that involve more than one setting live here too (a heartbeat interval must be below
the session timeout; settings of the other group protocol), so each rule exists once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kclient.config import AbstractConfig, ConsumerConfig, as_config
from kclient.consumer.fetch_config import FetchConfig
# The group layer's typed configs live beside the coordinators that read them.
from kclient.group.group_config import ConsumerCoordinatorConfig, GroupRebalanceConfig

__all__ = ["NetworkClientConfig", "FetchConfig", "GroupRebalanceConfig", "ConsumerCoordinatorConfig",
           "ConsumerSettings"]


def _checked(config: Mapping[str, Any] | AbstractConfig | None) -> AbstractConfig:
    """Checked settings: any client's as they are (each table has the settings its components
    read), a mapping checked as a consumer's."""
    return config if isinstance(config, AbstractConfig) else as_config(config)


@dataclass(frozen=True, slots=True)
class NetworkClientConfig:
    """Connections, requests and metadata (mechanisms §11)."""

    bootstrap_addresses: tuple[tuple[str, int], ...]
    client_id: str
    security_protocol: str
    request_timeout_ms: int
    connections_max_idle_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    socket_connection_setup_timeout_ms: int
    socket_connection_setup_timeout_max_ms: int
    send_buffer_bytes: int
    receive_buffer_bytes: int
    receive_thread: bool
    max_in_flight_requests_per_connection: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    metadata_max_age_ms: int
    allow_auto_create_topics: bool
    # TLS (SSL, SASL_SSL): the context, built and checked once; None for plaintext.
    ssl_context: Any = None
    # SASL (SASL_*): a fresh mechanism per connection (it holds the credentials; not shown).
    sasl_mechanism: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, config: Any) -> "NetworkClientConfig":
        if isinstance(config, cls):
            return config
        c = _checked(config)
        protocol = c["security.protocol"]
        ssl_context = sasl_mechanism = None
        if protocol in ("SSL", "SASL_SSL"):
            from kclient.network.tls import build_ssl_context
            ssl_context = build_ssl_context(c)
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            from kclient.network.sasl import mechanism_from_config
            mechanism_from_config(c)        # fail now, naming the setting, not at connect

            def sasl_mechanism():
                return mechanism_from_config(c)
        return cls(
            ssl_context=ssl_context,
            sasl_mechanism=sasl_mechanism,
            bootstrap_addresses=tuple(c.bootstrap_addresses),
            client_id=c["client.id"],
            security_protocol=c["security.protocol"],
            request_timeout_ms=c["request.timeout.ms"],
            connections_max_idle_ms=c["connections.max.idle.ms"],
            reconnect_backoff_ms=c["reconnect.backoff.ms"],
            reconnect_backoff_max_ms=c["reconnect.backoff.max.ms"],
            socket_connection_setup_timeout_ms=c["socket.connection.setup.timeout.ms"],
            socket_connection_setup_timeout_max_ms=c["socket.connection.setup.timeout.max.ms"],
            send_buffer_bytes=c["send.buffer.bytes"],
            receive_buffer_bytes=c["receive.buffer.bytes"],
            receive_thread=c["receive.thread"],
            max_in_flight_requests_per_connection=c["max.in.flight.requests.per.connection"],
            retry_backoff_ms=c["retry.backoff.ms"],
            retry_backoff_max_ms=c["retry.backoff.max.ms"],
            metadata_max_age_ms=c["metadata.max.age.ms"],
            allow_auto_create_topics=c["allow.auto.create.topics"],
        )


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """Every component's settings, built once from one checked ConsumerConfig."""

    config: ConsumerConfig
    network: NetworkClientConfig
    fetch: FetchConfig
    rebalance: GroupRebalanceConfig
    coordinator: ConsumerCoordinatorConfig

    @classmethod
    def of(cls, config: Any) -> "ConsumerSettings":
        c = config if isinstance(config, ConsumerConfig) else ConsumerConfig(config)
        return cls(c, NetworkClientConfig.of(c), FetchConfig.of(c), GroupRebalanceConfig.of(c),
                   ConsumerCoordinatorConfig.of(c))

"""NetworkClientConfig: the typed settings of the network layer, built once from the checked table.

Beside its component so that the network layer depends on the settings table
(``kclient.config``) and nothing depends back on it: ``NetworkClient`` accepts only this object.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kclient.config import ConsumerConfig, as_config
from kclient.network.pacemaker_security import pacemaker_security
from kclient.network.sasl import mechanism_from_config, oauth_provider_from_config
from kclient.network.tls import build_ssl_context

__all__ = ["NetworkClientConfig"]


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
    # KIP-899 / KIP-1102: start again from the bootstrap servers when the known brokers are gone.
    rebootstrap: bool = True
    rebootstrap_trigger_ms: int = 300_000
    # TLS (SSL, SASL_SSL): the context, built and checked once; None for plaintext.
    ssl_context: Any = None
    # SASL (SASL_*): a fresh mechanism per connection (it holds the credentials; not shown).
    sasl_mechanism: Any = field(default=None, repr=False)
    # OAUTHBEARER's built-in OAuth client: one per client, started and closed with it.
    token_provider: Any = field(default=None, repr=False)
    # The GIL-free pacemaker's own connection: the same security, in the form its C code takes
    # (kclient.network.pacemaker_security); None for plaintext.
    pacemaker_security: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, config: Any) -> "NetworkClientConfig":
        """From checked settings: a ConsumerConfig, or a mapping checked here against the table."""
        if isinstance(config, cls):
            return config
        c = config if isinstance(config, ConsumerConfig) else as_config(config)
        protocol = c["security.protocol"]
        ssl_context = sasl_mechanism = token_provider = None
        if protocol in ("SSL", "SASL_SSL"):
            ssl_context = build_ssl_context(c)
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            token_provider = oauth_provider_from_config(c)
            mechanism_from_config(c, token_provider)        # fail now, naming the setting, not at connect

            def sasl_mechanism():
                return mechanism_from_config(c, token_provider)
        return cls(
            pacemaker_security=None if protocol == "PLAINTEXT" else pacemaker_security(c, token_provider),
            ssl_context=ssl_context,
            sasl_mechanism=sasl_mechanism,
            token_provider=token_provider,
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
            rebootstrap=c["metadata.recovery.strategy"] == "rebootstrap",
            rebootstrap_trigger_ms=c["metadata.recovery.rebootstrap.trigger.ms"],
        )

"""The consumer's settings builder: one typed, immutable config per component.

``ConsumerConfig`` (``kclient.config``) is the consumer's table and a user's values checked
against it: name, type, range, default. ``ConsumerSettings.of(config)`` turns that into one
object per component, named as in the Java client, so that a component reads typed fields and
never a dotted key. Each typed config lives beside the component that reads it and accepts
only it: ``NetworkClientConfig`` (kclient.network.network_config), ``FetchConfig``
(kclient.consumer.fetch_config), ``GroupRebalanceConfig`` and ``ConsumerCoordinatorConfig``
(kclient.group.group_config, where the checks that involve two settings live: a heartbeat
interval below the session timeout, settings of the other group protocol). KafkaConsumer builds
them once here and hands each component its part; the producer and the admin client build their
``NetworkClientConfig`` from their own checked settings (``ProducerConfig``,
``AdminClientConfig``) the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kclient.config import ConsumerConfig
# Each layer's typed config lives beside the component that reads it.
from kclient.consumer.fetch_config import FetchConfig
from kclient.group.group_config import ConsumerCoordinatorConfig, GroupRebalanceConfig
from kclient.network.network_config import NetworkClientConfig

__all__ = ["NetworkClientConfig", "FetchConfig", "GroupRebalanceConfig", "ConsumerCoordinatorConfig",
           "ConsumerSettings"]


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

"""The admin client's settings (Kafka's ``AdminClientConfig``): its table and its checked values.

``ADMIN_CONFIGS`` is the admin client's table: the settings every client takes
(``common_client_defs()``) and the admin client's own.
"""
from __future__ import annotations

from kclient.config.common_client_configs import common_client_defs
from kclient.config.config_def import ClientConfig, ConfigDef, ConfigRegistry

__all__ = ["AdminClientConfig", "ADMIN_CONFIGS"]

ADMIN_CONFIGS: list[ConfigDef] = common_client_defs() + [
    ConfigDef("default.api.timeout.ms", "int", 60000, min=0,
              doc="the timeout of blocking calls given none (committed, position, offsets lookups...)"),
    # Metadata lookups of deleted topics must not create them again.
    ConfigDef("allow.auto.create.topics", "bool", False,
              doc="let Metadata requests create missing topics (if the broker allows it)"),
]


class AdminClientConfig(ClientConfig):
    """The admin client's checked settings (``ADMIN_CONFIGS``)."""

    @classmethod
    def table(cls) -> ConfigRegistry:
        return ConfigRegistry(ADMIN_CONFIGS, "admin client")

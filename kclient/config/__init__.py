"""Client settings: Kafka's documented names, types and defaults, one table per client.

As in the Java client, a client's *config* is its table of definitions together with a user's
values checked against it:

- ``config_def``: the machinery: ``ConfigDef`` (one setting's definition), ``ConfigRegistry``
  (a table of them), ``AbstractConfig`` (a user's settings checked against a table) and the
  validators tables share;
- ``common_client_configs``: the settings every client takes (``common_client_defs()``);
- ``consumer_config``, ``producer_config``, ``admin_config``: each client's table
  (``CONSUMER_CONFIGS``, ``PRODUCER_CONFIGS``, ``ADMIN_CONFIGS``) and its checked settings
  (``ConsumerConfig``, ``ProducerConfig``, ``AdminClientConfig``).

A client checks its settings once, when it is built, and then hands each component a typed
config of its own (``kclient.consumer.consumer_settings``); the configuration reference (docs/configuration.md)
is generated from these tables. ParallelConsumer's and the Spark source's options have tables
of their own on the same machinery (``kclient.parallel.settings``, ``kclient.spark.options``).
"""
from kclient.config.admin_config import ADMIN_CONFIGS, AdminClientConfig
from kclient.config.common_client_configs import common_client_defs
from kclient.config.config_def import (SECRET_SETTINGS, AbstractConfig, ClientConfig, ConfigDef, ConfigRegistry,
                                       callable_or_none, only_empty, parse_bootstrap_servers, plugin, unsupported,
                                       upper_choice)
from kclient.config.consumer_config import (CONSUMER_CONFIGS, ConsumerConfig, IsolationLevel, as_config,
                                            canonical_name, define, isolation_level)
from kclient.config.producer_config import CODECS, PRODUCER_CONFIGS, ProducerConfig

#: The former name of ``AbstractConfig`` (a user's settings checked against a table).
ClientSettings = AbstractConfig

__all__ = ["ConfigDef", "ConfigRegistry", "AbstractConfig", "ClientConfig", "ClientSettings",
           "ConsumerConfig", "ProducerConfig", "AdminClientConfig",
           "CONSUMER_CONFIGS", "PRODUCER_CONFIGS", "ADMIN_CONFIGS", "CODECS", "SECRET_SETTINGS",
           "IsolationLevel", "define", "canonical_name", "common_client_defs", "parse_bootstrap_servers",
           "as_config", "callable_or_none", "plugin", "unsupported", "only_empty", "upper_choice",
           "isolation_level"]

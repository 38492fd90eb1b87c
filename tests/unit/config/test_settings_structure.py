"""What docs/architecture.md's Settings section says about the code stays true.

- Only the tables, the typed configs' modules (``*_config.py``, beside their component), the
  builders of typed configs and the facades read a setting by its dotted name; every other module
  (the components) reads typed fields.
- Each table is the only place its defaults are defined: no ConfigDef outside the table modules,
  no fallback default when a setting is read (``config.get("fetch.max.wait.ms", 500)``), and the
  typed objects and signatures built on a table take its defaults.

Each check is a function over source text, so that a planted violation shows it can fail.
"""
from __future__ import annotations

import ast
import functools
import dataclasses
import inspect

import pytest

from kclient.config import ADMIN_CONFIGS, CONSUMER_CONFIGS, PRODUCER_CONFIGS
from repo_paths import REPO

KCLIENT = REPO / "kclient"

#: Modules allowed to read settings by dotted name, each with why; besides these, a component's
#: typed config module (``*_config.py``, e.g. ``consumer/fetch_config.py``) builds it from them.
READERS = {
    # the tables
    "config/": "the tables and their checked values",
    "parallel/settings.py": "ParallelConsumer's table",
    "spark/options.py": "the Spark source's table; it checks the 'kafka.'-prefixed options as consumer settings",
    # builders: checked settings -> a typed config or a part of one
    "consumer/consumer_settings.py": "builds each consumer component's typed config",
    "network/tls.py": "builds NetworkClientConfig's SSL context",
    "network/sasl.py": "builds NetworkClientConfig's SASL mechanism",
    "network/pacemaker_security.py": "builds NetworkClientConfig's TLS context and SASL credentials for the pacemaker",
    "consumer/interceptors.py": "builds the interceptors, which Kafka configures with the whole config",
    # facades: build a client from a user's settings, or read the public config of one
    "consumer/kafka_consumer.py": "the consumer's facade",
    "aio/consumer.py": "the asyncio consumer's facade (aiokafka's keywords onto the consumer's config)",
    "aio/producer.py": "the asyncio producer's facade",
    "cli/produce.py": "the console producer: builds its producer and admin client from -X settings",
    "cli/share_groups.py": "kclient share-groups: builds its admin client from -X settings",
    "producer.py": "the producer's facade",
    "admin.py": "the admin client's facade",
    "parallel/driver.py": "checks the KafkaConsumer it is given (group.id, enable.auto.commit)",
    "spark/planning.py": "builds the driver's consumer from the source's options",
    "spark/lookups.py": "builds the driver's network client and offset lookups from the source's options",
    "spark/reader.py": "builds the executors' consumers from the source's options",
}

#: Modules that define tables (ConfigDef entries).
TABLES = ("config/", "parallel/settings.py", "spark/options.py")

SETTING_NAMES = frozenset(CONSUMER_CONFIGS) | {d.name for d in PRODUCER_CONFIGS} | {d.name for d in ADMIN_CONFIGS}


@functools.lru_cache(maxsize=None)
def _parse(source: str) -> ast.AST:
    """Each module is parsed once for all the checks below (kclient's whole tree, three times
    over, was most of this file's time)."""
    return ast.parse(source)


def _dotted(node: ast.AST) -> str | None:
    """The setting named by a string constant, if it is a dotted setting name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
            and node.value in SETTING_NAMES:
        return node.value
    return None


def dotted_key_reads(source: str) -> list[tuple[int, str]]:
    """(line, setting) of every read by dotted name: ``c["x.y"]``, ``c.get("x.y")``, ``c.is_set("x.y")``."""
    found = []
    for node in ast.walk(_parse(source)):
        name = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name = _dotted(node.slice)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "is_set", "pop", "setdefault") and node.args):
            name = _dotted(node.args[0])
        if name is not None:
            found.append((node.lineno, name))
    return sorted(found)


def second_defaults(source: str) -> list[tuple[int, str]]:
    """(line, setting) of every read of a setting with a fallback default of its own:
    ``c.get("x.y", 500)``, ``getattr(c, "x_y", 500)`` (a None fallback is "absent", not a default)."""
    keywords = {n.replace(".", "_"): n for n in SETTING_NAMES}
    found = []
    for node in ast.walk(_parse(source)):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        first = node.args[0] if isinstance(node.func, ast.Attribute) else None
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault"):
            name = _dotted(first) if first is not None else None
            if name is not None:
                found.append((node.lineno, name))
        elif isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 3:
            attr = node.args[1]
            fallback = node.args[2]
            if (isinstance(attr, ast.Constant) and attr.value in keywords
                    and not (isinstance(fallback, ast.Constant) and fallback.value is None)):
                found.append((node.lineno, keywords[attr.value]))
    return sorted(found)


def config_defs(source: str) -> list[int]:
    """Lines that define a setting (construct a ConfigDef)."""
    return [node.lineno for node in ast.walk(_parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "ConfigDef"]


def _modules():
    for path in sorted(KCLIENT.rglob("*.py")):
        yield path.relative_to(KCLIENT).as_posix(), path.read_text()


def _allowed(module: str, allowed) -> bool:
    return any(module == a or (a.endswith("/") and module.startswith(a)) for a in allowed)


def _may_read_settings(module: str) -> bool:
    return module.endswith("_config.py") or _allowed(module, READERS)


# ---------------------------------------------------------------------- the checks can fail
PLANTED = '''
def build(config, max_bytes=None):
    limit = config["fetch.max.bytes"]
    if config.is_set("group.id"):
        wait = config.get("fetch.max.wait.ms", 500)
    rack = getattr(config, "client_rack", "")
    return ConfigDef("fetch.max.bytes", "int", 1)
'''


def test_the_checks_find_planted_violations():
    assert dotted_key_reads(PLANTED) == [(3, "fetch.max.bytes"), (4, "group.id"), (5, "fetch.max.wait.ms")]
    assert second_defaults(PLANTED) == [(5, "fetch.max.wait.ms"), (6, "client.rack")]
    assert config_defs(PLANTED) == [7]
    # strings that are not settings, and writes, are not reads
    assert dotted_key_reads('d = {}\nd["fetch.max.bytes"] = 1\nx = m["a.b"]\ny = m["retries"]\n') == []


# ---------------------------------------------------------------------- the code
def test_components_never_read_a_dotted_key():
    offenders = {module: reads for module, text in _modules()
                 if not _may_read_settings(module) and (reads := dotted_key_reads(text))}
    assert not offenders, (
        "these modules read settings by dotted name; give their component a field in its typed "
        f"config instead: {offenders}")


def test_every_module_listed_exists():
    # A moved or renamed module loses its exemption, so the list stays the truth.
    modules = dict(_modules())
    gone = [a for a in READERS if not a.endswith("/") and a not in modules]
    assert not gone, f"listed as reading settings by name, but no longer in kclient/: {gone}"


def test_settings_are_defined_only_in_the_tables():
    outside = {module: lines for module, text in _modules()
               if not _allowed(module, TABLES) and (lines := config_defs(text))}
    assert not outside, f"ConfigDef outside the tables: {outside}"


def test_no_setting_is_read_with_a_default_of_its_own():
    found = {module: hits for module, text in _modules() if (hits := second_defaults(text))}
    assert not found, f"a second default for a setting (the table holds it): {found}"


def test_parallel_consumer_takes_its_defaults_from_its_table():
    from kclient.parallel.driver import ParallelConsumer
    from kclient.parallel.settings import PARALLEL_CONFIGS, Settings
    signature = inspect.signature(ParallelConsumer.__init__).parameters
    for name, d in PARALLEL_CONFIGS.defs.items():
        assert signature[name].default == d.default, name
    assert {f.name: getattr(Settings(), f.name) for f in dataclasses.fields(Settings)} == \
        {name: d.default for name, d in PARALLEL_CONFIGS.defs.items()}


def test_the_spark_source_takes_its_defaults_from_its_table():
    from kclient.spark.options import SOURCE_OPTIONS, parse_options
    opts = parse_options({"kafka.bootstrap.servers": "localhost:9", "subscribe": "t"})
    by_option = {"failOnDataLoss": opts.fail_on_data_loss, "kafkaConsumer.pollTimeoutMs": opts.poll_timeout_ms,
                 "includeHeaders": opts.include_headers, "minPartitions": opts.min_partitions,
                 "maxRecordsPerPartition": opts.max_records_per_partition,
                 "kclient.maxPartitions": opts.max_partitions, "fetchOffset.numRetries": opts.num_retries,
                 "fetchOffset.retryIntervalMs": opts.retry_interval_ms,
                 "kclient.endOffsetProbe": opts.end_offset_probe,
                 "kclient.maxRecordsPerBatch": opts.max_records_per_batch,
                 "startingOffsetsByTimestampStrategy": opts.starting_by_timestamp_strategy,
                 "committedOffsetsFallback": opts.committed_fallback,
                 "maxOffsetsPerTrigger": opts.max_offsets_per_trigger,
                 "kclient.commitOffsets": opts.commit_offsets}
    for name, value in by_option.items():
        assert value == SOURCE_OPTIONS.defs[name].default, name
    assert opts.starting == ("offsets", SOURCE_OPTIONS.defs["startingOffsets"].default)
    assert opts.ending == ("offsets", SOURCE_OPTIONS.defs["endingOffsets"].default)


@pytest.mark.parametrize("table", ["consumer", "producer", "admin"])
def test_each_client_checks_its_settings_against_its_own_table(table):
    from kclient.config import AdminClientConfig, ConsumerConfig, ProducerConfig
    cls, defs = {"consumer": (ConsumerConfig, list(CONSUMER_CONFIGS.values())),
                 "producer": (ProducerConfig, PRODUCER_CONFIGS), "admin": (AdminClientConfig, ADMIN_CONFIGS)}[table]
    checked = cls()
    assert dict(checked) == {d.name: d.default for d in defs}

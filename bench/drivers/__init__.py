"""Client drivers: one module per client, each run in its own child process.

A driver module defines:

- ``LABEL``: the name shown in reports.
- ``GROUP_MODE``: whether it can consume as a group member (time to first record).
- ``version() -> str``: the client library's version.
- ``prepare()``: import the client library (the child calls it before the window opens).
- ``consume(job, tally) -> dict | None``: build the client (calling ``tally.start()`` just
  before), consume until ``tally.add()`` says done (assign mode: all N records from offset 0;
  group mode: subscribe with ``job.group_id``, stop after the first record) or
  ``tally.timed_out()``, close the client; returns the settings it used, for the report.

- optionally ``check()``: called once by the runner before any run; if it raises (a missing
  runtime or compiler, say), the driver is skipped and the table says why.

The child (``python -m bench.drivers JOB_JSON RESULT_PATH``) imports the driver and calls
``prepare()`` before the window opens, so import time is not measured. Drivers may also
define ``member(...)``: a group member for the liveness benchmark (bench/liveness.py).
"""
from __future__ import annotations

import importlib

# Report order: the ceiling first, then kclient, then the peers.
DRIVERS: dict[str, str] = {
    "raw-fetch": "bench.drivers.raw_fetch",
    "kclient-records": "bench.drivers.kclient_records",
    "kclient-columnar": "bench.drivers.kclient_columnar",
    "kclient-records-defaults": "bench.drivers.kclient_defaults:RECORDS",
    "kclient-columnar-defaults": "bench.drivers.kclient_defaults:COLUMNAR",
    "kclient-iter": "bench.drivers.kclient_iter",
    "kclient-iter-zero-copy": "bench.drivers.kclient_iter:ZERO_COPY",
    "java": "bench.drivers.java_consumer",
    "confluent-tuned": "bench.drivers.confluent_tuned",
    "confluent-default": "bench.drivers.confluent_default",
    "kclient-aio": "bench.drivers.kclient_aio",
    "kclient-aio-columnar": "bench.drivers.kclient_aio:COLUMNAR",
    "aiokafka": "bench.drivers.aiokafka_driver",
    "confluent-aio": "bench.drivers.confluent_aio",
    "kafka-python": "bench.drivers.kafka_python",
}


def load(name: str):
    """The driver: a module, or ("module:NAME") an object in one with a module's attributes.
    ``<driver>@baseline`` (the runner's --baseline) is that driver run from another checkout."""
    try:
        module, _, attr = DRIVERS[name.removesuffix("@baseline")].partition(":")
    except KeyError:
        raise ValueError(f"unknown driver {name!r}; known: {', '.join(DRIVERS)}") from None
    found = importlib.import_module(module)
    return getattr(found, attr) if attr else found

"""kclient per record with kclient's defaults (Kafka's documented consumer defaults: 64 KiB
receive buffer, 1 MiB per partition, 500 ms fetch wait, 500 records per poll), beside the
kclient-records driver, which runs with the tuned peers' fetch settings."""
from __future__ import annotations

from bench.drivers import kclient_records as _tuned

LABEL = "kclient (per record, defaults)"
GROUP_MODE = True
version, prepare = _tuned.version, _tuned.prepare


def consume(job, tally) -> dict:
    return _tuned.consume(job, tally, base={})

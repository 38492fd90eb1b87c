"""kclient as installed: the kclient-records and kclient-columnar drivers run with the tuned
peers' fetch settings (bench/drivers/_common.py); these run the same loops with kclient's
defaults (Kafka's documented consumer defaults: 1 MiB per partition, 500 ms fetch wait, 500
records per poll; the receive buffer left to the OS, as kafka-python and librdkafka leave it)."""
from __future__ import annotations

from types import ModuleType

from bench.drivers import kclient_columnar, kclient_records


class AsInstalled:
    """A driver (the attributes a driver module has) that runs ``tuned``'s loop with no
    settings of its own."""

    GROUP_MODE = True

    def __init__(self, tuned: ModuleType, label: str) -> None:
        self._tuned = tuned
        self.LABEL = label
        self.version, self.prepare = tuned.version, tuned.prepare

    def consume(self, job, tally) -> dict:
        return self._tuned.consume(job, tally, base={})


RECORDS = AsInstalled(kclient_records, "kclient (per record, defaults)")
COLUMNAR = AsInstalled(kclient_columnar, "kclient (columnar, defaults)")

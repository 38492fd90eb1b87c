"""The settings of the clients that read planned ranges on executors (no broker)."""
from __future__ import annotations

from kclient.spark.planning import parse_options
from kclient.spark.reader import READER_FETCH_WAIT_MS, reader_client_params

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}


def test_readers_wait_briefly_for_fetches_unless_the_options_say_otherwise():
    opts = parse_options(BOOT)
    params = reader_client_params(opts)
    assert READER_FETCH_WAIT_MS == 50 and params["fetch.max.wait.ms"] == 50
    assert params["auto.offset.reset"] == "none" and params["enable.auto.commit"] is False
    assert "fetch.max.wait.ms" not in opts.client_params()        # other clients keep the default
    given = reader_client_params(parse_options({**BOOT, "kafka.fetch.max.wait.ms": "500"}))
    assert given["fetch.max.wait.ms"] == "500"

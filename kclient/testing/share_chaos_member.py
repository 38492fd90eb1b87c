"""One share-group member of the share chaos harness (kclient.testing.share_chaos), as a child
process.

``python -m kclient.testing.share_chaos_member --bootstrap B --topic T --group G [--set key=value ...]``
subscribes a KafkaShareConsumer in explicit acknowledgement mode, and after each poll
acknowledges every record and sends the acknowledgements with ``commit_sync()`` before polling
again. The type is a function of the record (the value is the producer's sequence number), so
every run exercises all of them: REJECT when ``value % 50 == 7``; RELEASE on the first delivery
when ``value % 50 == 3`` (it must come back); ACCEPT otherwise. One JSON line per event on
standard output:

* ``{"e": "start"}`` once the consumer is built;
* ``{"e": "poll", "t": unix seconds, "r": [[partition, [[offset, value, delivery_count], ...]], ...]}``;
* ``{"e": "ack", "t": ..., "r": [[partition, offset, type], ...], "ok": [partitions], "failed": [partitions]}``:
  the acknowledgements of a poll and, per partition, whether the broker took them (a partition
  in neither list had no answer: unknown);
* ``{"e": "error", "err": str}`` for an exception from poll() or commit_sync() (the loop goes on);
* ``{"e": "closed"}`` after a clean close (SIGTERM or SIGINT).
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from typing import Any

ACCEPT, RELEASE, REJECT = 1, 2, 3


def ack_type(value: int, delivery_count: int) -> int:
    if value % 50 == 7:
        return REJECT
    if value % 50 == 3 and delivery_count == 1:
        return RELEASE
    return ACCEPT


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _value(v: bytes | None) -> int:
    try:
        return int(v) if v is not None else -1
    except ValueError:
        return -1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kclient.testing.share_chaos_member")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a share consumer setting (Java-style key)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kclient.network").setLevel(logging.WARNING)

    from kclient import errors as Errors
    from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer

    settings: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
                                "share.acknowledgement.mode": "explicit", "client.id": "kclient-share-chaos-member"}
    for item in args.set:
        key, _, value = item.partition("=")
        settings[key] = value
    consumer = KafkaShareConsumer(**settings)
    stopping: list[bool] = []

    def stop(_signum, _frame) -> None:
        stopping.append(True)
        consumer.wakeup()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer.subscribe([args.topic])
    _emit({"e": "start"})
    try:
        while not stopping:
            try:
                polled = consumer.poll(100)
            except Errors.WakeupError:
                break
            except Errors.KafkaError as exc:
                _emit({"e": "error", "err": repr(exc)})
                continue
            if not polled:
                continue
            _emit({"e": "poll", "t": time.time(),
                   "r": [[tp.partition, [[r.offset, _value(r.value), r.delivery_count] for r in recs]]
                         for tp, recs in sorted(polled.items()) if recs]})
            acks = []
            for tp, recs in polled.items():
                for r in recs:
                    kind = ack_type(_value(r.value), r.delivery_count)
                    consumer.acknowledge(r, type=AcknowledgeType(kind))
                    acks.append([tp.partition, r.offset, kind])
            try:
                results = consumer.commit_sync(10000)
            except Errors.WakeupError:
                _emit({"e": "ack", "t": time.time(), "r": acks, "ok": [], "failed": []})
                break
            except Errors.KafkaError as exc:
                _emit({"e": "error", "err": repr(exc)})
                _emit({"e": "ack", "t": time.time(), "r": acks, "ok": [], "failed": []})
                continue
            _emit({"e": "ack", "t": time.time(), "r": acks,
                   "ok": sorted(tp.partition for tp, err in results.items() if err is None),
                   "failed": sorted(tp.partition for tp, err in results.items() if err is not None)})
    finally:
        consumer.close()
        _emit({"e": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())

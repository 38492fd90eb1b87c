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
* ``{"e": "acking", "t": ..., "r": [[partition, offset, type], ...]}``: the acknowledgements of a
  poll, just before ``commit_sync()`` sends them (a member killed before it reports the answer
  leaves this behind: the broker may have taken them);
* ``{"e": "ack", "t": ..., "r": [[partition, offset, type], ...], "ok": [partitions], "failed": [partitions]}``:
  the same acknowledgements and, per partition, whether the broker took them ("failed": the
  broker answered an error). A partition in neither list has an unknown outcome: no answer, or
  the connection was lost or the request timed out after it was sent (a leader killed while
  writing the acknowledgement to the share coordinator may still have taken it);
* ``{"e": "error", "err": str}`` for an exception from poll() or commit_sync() (the loop goes on);
* ``{"e": "closed"}`` after a clean close (SIGTERM or SIGINT).
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

from kclient.testing.chaos_member_cli import emit, parse_member_args, poll_loop, record_value, stop_on_signals

ACCEPT, RELEASE, REJECT = 1, 2, 3


def ack_type(value: int, delivery_count: int) -> int:
    if value % 50 == 7:
        return REJECT
    if value % 50 == 3 and delivery_count == 1:
        return RELEASE
    return ACCEPT


def _outcome(results: dict[Any, BaseException | None], unknown: tuple[type, ...]) -> tuple[list[int], list[int]]:
    """The partitions whose acknowledgements the broker took, and those it refused; a partition
    whose request got no answer (``unknown`` errors) is in neither."""
    ok = sorted(tp.partition for tp, err in results.items() if err is None)
    failed = sorted(tp.partition for tp, err in results.items() if err is not None and not isinstance(err, unknown))
    return ok, failed


def main(argv: list[str] | None = None) -> int:
    args = parse_member_args("python -m kclient.testing.share_chaos_member", "share consumer",
                             {"share.acknowledgement.mode": "explicit", "client.id": "kclient-share-chaos-member"},
                             argv)
    # each ShareFetch and ShareAcknowledge with what it carried, and what each answer acquired
    logging.getLogger("kclient.share.fetcher").setLevel(logging.DEBUG)

    from kclient import errors as Errors
    from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer

    # errors of a request that got no answer: the broker may or may not have taken it
    unanswered = (Errors.KafkaConnectionError, Errors.KafkaTimeoutError, Errors.RequestTimedOutError)
    consumer = KafkaShareConsumer(**args.settings)
    stopping = stop_on_signals(consumer.wakeup)
    consumer.subscribe([args.topic])

    def handle(polled: dict) -> bool:
        emit({"e": "poll", "t": time.time(),
              "r": [[tp.partition, [[r.offset, record_value(r.value), r.delivery_count] for r in recs]]
                    for tp, recs in sorted(polled.items()) if recs]})
        acks = []
        for tp, recs in polled.items():
            for r in recs:
                kind = ack_type(record_value(r.value), r.delivery_count)
                consumer.acknowledge(r, type=AcknowledgeType(kind))
                acks.append([tp.partition, r.offset, kind])
        emit({"e": "acking", "t": time.time(), "r": acks})
        try:
            results = consumer.commit_sync(10000)
        except Errors.WakeupError:
            emit({"e": "ack", "t": time.time(), "r": acks, "ok": [], "failed": []})
            return False
        except Errors.KafkaError as exc:
            emit({"e": "error", "err": repr(exc)})
            emit({"e": "ack", "t": time.time(), "r": acks, "ok": [], "failed": []})
            return True
        ok, failed = _outcome(results, unanswered)
        emit({"e": "ack", "t": time.time(), "r": acks, "ok": ok, "failed": failed})
        return True

    return poll_loop(consumer, stopping, handle)

if __name__ == "__main__":
    sys.exit(main())

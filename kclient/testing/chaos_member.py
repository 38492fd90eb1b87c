"""One consumer group member of the chaos harness (kclient.testing.chaos), as a child process.

``python -m kclient.testing.chaos_member --bootstrap B --topic T --group G [--set key=value ...]``
subscribes, polls, and commits synchronously what each poll returned before polling again
(at-least-once, no auto-commit), writing one JSON line per event to standard output:

* ``{"e": "start"}`` once the consumer is built;
* ``{"e": "assigned" | "revoked" | "lost", "g": generation, "p": [partitions]}``;
* ``{"e": "poll", "t": unix seconds, "g": generation, "r": [[partition, [[offset, value], ...]], ...]}``;
* ``{"e": "commit", "t": ..., "g": generation, "o": [[partition, offset], ...], "ok": bool, "err": str}``;
* ``{"e": "error", "err": str}`` for an exception from poll() (the loop goes on);
* ``{"e": "closed"}`` after a clean close (SIGTERM or SIGINT).

It is kclient verifiable-consumer's loop, plus what the checker needs and Kafka's
VerifiableConsumer protocol has no field for: the group generation each delivery and commit
happened in (records delivered to two members of one generation are a split brain), and each
record's value (the producer's sequence number). Classic group protocol: its generation is
group-wide, which the split-brain criterion relies on.
"""
from __future__ import annotations

import sys
import time

from kclient.testing.chaos_member_cli import emit, parse_member_args, poll_loop, record_value, stop_on_signals


def main(argv: list[str] | None = None) -> int:
    args = parse_member_args("python -m kclient.testing.chaos_member", "consumer", {
        "group.protocol": "classic", "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "client.id": "kclient-chaos-member"}, argv)

    from kclient import errors as Errors
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.subscription.listener import ConsumerRebalanceListener
    from kclient.structs import OffsetAndMetadata

    consumer = KafkaConsumer(args.settings)
    coordinator = consumer._coordinator
    assert coordinator is not None  # a group member

    def generation() -> int:
        return coordinator.committer.group_metadata().generation_id

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit({"e": "revoked", "g": generation(), "p": sorted(tp.partition for tp in revoked)})

        def on_partitions_assigned(self, assigned):
            emit({"e": "assigned", "g": generation(), "p": sorted(tp.partition for tp in assigned)})

        def on_partitions_lost(self, lost):
            emit({"e": "lost", "g": generation(), "p": sorted(tp.partition for tp in lost)})

    stopping = stop_on_signals(consumer.wakeup)
    consumer.subscribe([args.topic], listener=Listener())

    def handle(polled: dict) -> bool:
        gen = generation()
        emit({"e": "poll", "t": time.time(), "g": gen,
              "r": [[tp.partition, [[r.offset, record_value(r.value)] for r in recs]]
                    for tp, recs in sorted(polled.items()) if recs]})
        offsets = {tp: OffsetAndMetadata(recs[-1].offset + 1, "", recs[-1].leader_epoch)
                   for tp, recs in polled.items() if recs}
        listed = [[tp.partition, om.offset] for tp, om in sorted(offsets.items())]
        try:
            consumer.commit(offsets)
        except Errors.WakeupError:
            emit({"e": "commit", "t": time.time(), "g": gen, "o": listed, "ok": False, "err": "wakeup"})
            return False
        except Errors.KafkaError as exc:
            emit({"e": "commit", "t": time.time(), "g": gen, "o": listed, "ok": False, "err": repr(exc)})
        else:
            emit({"e": "commit", "t": time.time(), "g": gen, "o": listed, "ok": True, "err": None})
        return True

    return poll_loop(consumer, stopping, handle)

if __name__ == "__main__":
    sys.exit(main())

"""One group member of the rebalance benchmark (bench/rebalance.py), as a child process.

``python -m bench.rebalance_member kclient|confluent BOOTSTRAP TOPIC GROUP PROTOCOL [KEY=VALUE...]``
speaks the line protocol of bench/java/JavaRebalanceMember.java: READY once the client is
imported and built; GO subscribes; ``S <owned> <unread>`` after every assignment change (how
many partitions it owns, how many of those it has not read from since they came);
``R <partition> <unread>`` for the first record of a partition since it was (re)assigned; STOP
closes the consumer (leaving the group) and prints CLOSED.
"""
from __future__ import annotations

import select
import sys


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _stop_requested() -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    if not ready:
        return False
    if not sys.stdin.readline():
        sys.exit(0)          # the runner went away
    return True


def run_kclient(bootstrap: str, topic: str, group: str, protocol: str, extra: dict) -> None:
    from kclient import KafkaConsumer
    settings = {"group_protocol": protocol, "auto_offset_reset": "earliest", "enable_auto_commit": False}
    if protocol == "classic":
        settings.update(session_timeout_ms=6000, heartbeat_interval_ms=500)
    settings.update(extra)
    fresh: set[int] = set()
    owned: set[int] = set()

    class Listener:
        def on_partitions_revoked(self, parts):
            fresh.difference_update(tp.partition for tp in parts)
            owned.difference_update(tp.partition for tp in parts)
            _say(f"S {len(owned)} {len(fresh)}")

        def on_partitions_assigned(self, parts):
            fresh.update(tp.partition for tp in parts)
            owned.update(tp.partition for tp in parts)
            _say(f"S {len(owned)} {len(fresh)}")

        def on_partitions_lost(self, parts):
            self.on_partitions_revoked(parts)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **settings)
    _say("READY")
    if sys.stdin.readline().strip() != "GO":
        return
    consumer.subscribe([topic], listener=Listener())
    while not _stop_requested():
        for tp, records in consumer.poll(timeout_ms=100).items():
            if records and tp.partition in fresh:
                fresh.discard(tp.partition)
                _say(f"R {tp.partition} {len(fresh)}")
    consumer.close()
    _say("CLOSED")


def run_confluent(bootstrap: str, topic: str, group: str, protocol: str, extra: dict) -> None:
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    conf.update(extra)
    fresh: set[int] = set()
    owned: set[int] = set()

    def on_assign(_consumer, parts):
        fresh.update(tp.partition for tp in parts)
        owned.update(tp.partition for tp in parts)
        _say(f"S {len(owned)} {len(fresh)}")

    def on_revoke(_consumer, parts):
        fresh.difference_update(tp.partition for tp in parts)
        owned.difference_update(tp.partition for tp in parts)
        _say(f"S {len(owned)} {len(fresh)}")

    consumer = Consumer(conf)
    _say("READY")
    if sys.stdin.readline().strip() != "GO":
        return
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    while not _stop_requested():
        msg = consumer.poll(0.1)
        if msg is None or msg.error():
            continue
        if msg.partition() in fresh:
            fresh.discard(msg.partition())
            _say(f"R {msg.partition()} {len(fresh)}")
    consumer.close()
    _say("CLOSED")


def main(argv: list[str]) -> None:
    client, bootstrap, topic, group, protocol, *rest = argv
    extra = dict(kv.split("=", 1) for kv in rest)
    try:
        {"kclient": run_kclient, "confluent": run_confluent}[client](bootstrap, topic, group, protocol, extra)
    except Exception as exc:  # reported to the runner, which marks the cell failed
        _say(f"E {exc!r}".replace("\n", " "))


if __name__ == "__main__":
    main(sys.argv[1:])

"""One share-group member of ``python -m bench share`` (bench/share.py), in a process of its own:
``python -m bench.share_members DRIVER BOOTSTRAP TOPIC PARTITIONS GROUP``.

Every driver speaks the line protocol of bench/java/JavaShareConsumerBench.java: it prints
``READY`` once its client library is imported, builds its consumer on ``GO`` (the window is
open), prints ``B <records>`` for each poll that returned records, ``X <why>`` for wrong data,
``E <error>`` when the client failed, and closes on ``STOP``; the end of stdin ends the process.
Every member acknowledges implicitly (each poll accepts the records of the previous one; the
raw loop accepts the ranges it acquired with its next ShareFetch) and spot-checks the last
record of each partition of a poll: its value's first 8 bytes must be offset * P + partition.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from typing import Any, Callable

from bench.drivers._common import PEER_MAX_POLL_RECORDS, SEQ

#: Records per poll for every client (the Java default of 500 would make the peers pay a poll per 500).
MAX_POLL_RECORDS = PEER_MAX_POLL_RECORDS
DRIVERS = ("kclient-records", "kclient-columnar", "confluent", "raw-sharefetch")
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a fresh broker's
#: group coordinator may still be loading; the raw member asks again.
_COORDINATOR_LOADING = (14, 15, 16)


def _bad(partition: int, offset: int, value: Any, partitions: int) -> str | None:
    if value is None or len(value) < SEQ.size:
        return f"partition {partition} offset {offset}: no sequence number"
    seq = SEQ.unpack_from(value, 0)[0]
    want = offset * partitions + partition
    return None if seq == want else f"partition {partition} offset {offset}: sequence {seq}, expected {want}"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _watch_stdin(stop: threading.Event) -> None:
    """STOP sets ``stop``; the end of stdin (the runner is gone) ends the process at once."""
    for line in sys.stdin:
        if line.strip() == "STOP":
            stop.set()
    os._exit(2)


# ---------------------------------------------------------------------- request counts
#: Set by ``--stats DIR`` of bench/share.py: each member writes its request counts there on exit.
STATS_DIR_ENV = "KCLIENT_BENCH_SHARE_STATS"
STATS: dict[str, int] = {"share_fetch": 0, "share_fetch_ahead": 0, "share_acknowledge": 0,
                         "fetch_answers": 0, "fetch_answers_empty": 0, "acquired_records": 0,
                         "acquired_ranges": 0, "ahead_answers_empty": 0, "ahead_records": 0,
                         "ack_partitions": 0, "ack_batches": 0, "polls": 0,
                         "polls_empty": 0}


def _count_ack_batches(body: dict) -> None:
    for t in body.get("topics") or ():
        for p in t["partitions"]:
            batches = p.get("acknowledgement_batches") or ()
            if batches:
                STATS["ack_partitions"] += 1
                STATS["ack_batches"] += len(batches)


def _count_answer(resp: dict, ahead: bool = False) -> None:
    records = ranges = 0
    for t in resp.get("responses") or ():
        for p in t["partitions"]:
            for r in p.get("acquired_records") or ():
                ranges += 1
                records += r["last_offset"] - r["first_offset"] + 1
    STATS["fetch_answers"] += 1
    STATS["fetch_answers_empty"] += records == 0
    STATS["acquired_records"] += records
    STATS["acquired_ranges"] += ranges
    if ahead:
        STATS["ahead_answers_empty"] += records == 0
        STATS["ahead_records"] += records


def _instrument_kclient(consumer: Any) -> None:
    """Count the share requests a kclient member sends and what the fetches bring back (the
    consumer's network client's ``send``, wrapped); only when asked, so a plain run times the
    client as it is."""
    if not os.environ.get(STATS_DIR_ENV):
        return
    from kclient.protocol import ApiKey
    fetch, ack = int(ApiKey.SHARE_FETCH), int(ApiKey.SHARE_ACKNOWLEDGE)
    client = consumer._client
    send = client.send

    def counting_send(node: Any, api_key: int, body: Any, **kw: Any) -> Any:
        future = send(node, api_key, body, **kw)
        if api_key == fetch:
            STATS["share_fetch"] += 1
            ahead = body.get("max_wait_ms") == 0
            STATS["share_fetch_ahead"] += ahead
            _count_ack_batches(body)
            future.on_success(lambda resp: _count_answer(resp, ahead))
        elif api_key == ack:
            STATS["share_acknowledge"] += 1
            _count_ack_batches(body)
        return future

    client.send = counting_send


def _write_stats(driver: str) -> None:
    where = os.environ.get(STATS_DIR_ENV)
    if where:
        import json
        with open(os.path.join(where, f"{driver}-{os.getpid()}.json"), "w") as f:
            json.dump(STATS, f)


# ---------------------------------------------------------------------- the clients
def kclient_records(bootstrap: str, topic: str, partitions: int, group: str, stop: threading.Event) -> None:
    from kclient.share.consumer import KafkaShareConsumer
    with KafkaShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                            max_poll_records=MAX_POLL_RECORDS) as consumer:
        _instrument_kclient(consumer)
        while not stop.is_set():
            polled = consumer.poll(100)
            STATS["polls"] += 1
            if not polled:
                STATS["polls_empty"] += 1
                continue
            n = 0
            for tp, records in polled.items():
                last = records[-1]
                bad = _bad(tp.partition, last.offset, last.value, partitions)
                if bad:
                    _say(f"X {bad}")
                    return
                n += len(records)
            _say(f"B {n}")


def kclient_columnar(bootstrap: str, topic: str, partitions: int, group: str, stop: threading.Event) -> None:
    from kclient.share.consumer import KafkaShareConsumer
    with KafkaShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                            max_poll_records=MAX_POLL_RECORDS) as consumer:
        _instrument_kclient(consumer)
        poll = consumer.poll_columnar  # type: ignore[attr-defined]
        while not stop.is_set():
            polled = poll(timeout_ms=100)
            n = sum(len(cols) for cols in polled.values()) if polled else 0
            STATS["polls"] += 1
            STATS["polls_empty"] += not n
            if n:
                _say(f"B {n}")


def confluent(bootstrap: str, topic: str, partitions: int, group: str, stop: threading.Event) -> None:
    from confluent_kafka import ShareConsumer
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                                "max.poll.records": str(MAX_POLL_RECORDS), "log_level": 3}
    # its share requests, from librdkafka's statistics (only when asked: they cost a little)
    seen: list[str] = []
    if os.environ.get(STATS_DIR_ENV):
        settings.update({"statistics.interval.ms": 100, "stats_cb": seen.append})
    consumer = ShareConsumer(settings)
    try:
        consumer.subscribe([topic])
        while not stop.is_set():
            messages = consumer.poll(0.1)
            STATS["polls"] += 1
            if not messages:
                STATS["polls_empty"] += 1
                continue
            last: dict[int, Any] = {}
            for m in messages:
                if m.error() is not None:
                    _say(f"E {m.error()}")
                    return
                last[m.partition()] = m
            for p, m in last.items():
                bad = _bad(p, m.offset(), m.value(), partitions)
                if bad:
                    _say(f"X {bad}")
                    return
            _say(f"B {len(messages)}")
        if settings.get("stats_cb"):
            _confluent_requests(consumer, seen)
    finally:
        consumer.close()


def _confluent_requests(consumer: Any, seen: list[str]) -> None:
    """Waits for the statistics after the run's last request (the next interval's; the polls
    meanwhile may send a fetch or two more) and counts the share requests it names."""
    import json
    had, deadline = len(seen), time.monotonic() + 1.0
    while len(seen) == had and time.monotonic() < deadline:
        consumer.poll(0.05)
    if not seen:
        return
    for broker in json.loads(seen[-1])["brokers"].values():
        req = broker.get("req", {})
        STATS["share_fetch"] += req.get("ShareFetch", 0)
        STATS["share_acknowledge"] += req.get("ShareAcknowledge", 0)


def raw_sharefetch(bootstrap: str, topic: str, partitions: int, group: str, stop: threading.Event) -> None:
    """The ceiling: ShareFetch over plain sockets, records counted from the acquired ranges
    (never decoded), each range accepted by the next ShareFetch to its leader; a thread
    heartbeats the membership on a connection of its own."""
    import selectors

    from bench.drivers.raw_fetch import _Conn
    from kclient.protocol import ApiKey, decode_response, negotiate, response_correlation_id

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    boot = _Conn(host, int(port))
    api = boot.call(int(ApiKey.API_VERSIONS), 3, {"client_software_name": "bench-raw-share",
                                                 "client_software_version": "1"})
    versions = negotiate({k["api_key"]: (k["min_version"], k["max_version"]) for k in api["api_keys"]})
    meta = boot.call(int(ApiKey.METADATA), min(versions[int(ApiKey.METADATA)], 12),
                     {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}
    (tmeta,) = [t for t in meta["topics"] if t["name"] == topic]
    topic_id = tmeta["topic_id"]
    leader_of = {p["partition_index"]: p["leader_id"] for p in tmeta["partitions"]}
    deadline = time.monotonic() + 60
    while True:   # the coordinator may still be loading its partition
        found = boot.call(int(ApiKey.FIND_COORDINATOR), 4, {"key_type": 0, "coordinator_keys": [group]})
        coordinator = found["coordinators"][0]
        if not coordinator["error_code"]:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"FindCoordinator error {coordinator['error_code']} for 60 s")
        stop.wait(0.1)
    boot.close()

    member_id = uuid.uuid4().hex
    assigned: set[int] = set()
    lock = threading.Lock()
    failure: list[str] = []
    hb = _Conn(coordinator["host"], coordinator["port"])
    hb_key = int(ApiKey.SHARE_GROUP_HEARTBEAT)

    def heartbeat() -> None:
        epoch, first = 0, True
        retry_until = time.monotonic() + 60
        try:
            while not stop.is_set():
                resp = hb.call(hb_key, 1, {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                                           "rack_id": None, "subscribed_topic_names": [topic] if first else None})
                if resp["error_code"] in _COORDINATOR_LOADING and time.monotonic() < retry_until:
                    stop.wait(0.2)
                    continue
                if resp["error_code"]:
                    failure.append(f"ShareGroupHeartbeat error {resp['error_code']}: {resp.get('error_message')}")
                    return
                first, epoch = False, resp["member_epoch"]
                if resp.get("assignment") is not None:
                    with lock:
                        assigned.clear()
                        assigned.update(p for t in resp["assignment"]["topic_partitions"] if t["topic_id"] == topic_id
                                        for p in t["partitions"])
                stop.wait(resp["heartbeat_interval_ms"] / 1000.0)
            hb.call(hb_key, 1, {"group_id": group, "member_id": member_id, "member_epoch": -1,
                                "rack_id": None, "subscribed_topic_names": None})
        except Exception as exc:   # reported to the runner by the fetch loop
            failure.append(f"heartbeat: {exc!r}")

    threading.Thread(target=heartbeat, daemon=True).start()
    fetch_key = int(ApiKey.SHARE_FETCH)
    fetch_v = 1
    conns: dict[int, _Conn] = {}
    sel = selectors.DefaultSelector()
    sessions: dict[int, dict] = {}

    def send(leader: int) -> bool:
        with lock:
            wanted = {p for p in assigned if leader_of.get(p) == leader}
        s = sessions.setdefault(leader, {"epoch": 0, "parts": set(), "acks": {}})
        if not wanted and not s["parts"]:
            return False
        listed = wanted if s["epoch"] == 0 else (wanted - s["parts"]) | set(s["acks"])
        forgotten = sorted(s["parts"] - wanted) if s["epoch"] else []
        acks, s["acks"] = s["acks"], {}
        body = {"group_id": group, "member_id": member_id, "share_session_epoch": s["epoch"],
                "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 * 1024 * 1024,
                "max_records": MAX_POLL_RECORDS, "batch_size": MAX_POLL_RECORDS,
                "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": [
                        {"first_offset": f, "last_offset": last, "acknowledge_types": [1]}
                        for f, last in acks.get(p, ())]} for p in sorted(listed)]}] if listed else [],
                "forgotten_topics_data": [{"topic_id": topic_id, "partitions": forgotten}] if forgotten else []}
        s["parts"] = wanted
        STATS["share_fetch"] += 1
        _count_ack_batches(body)
        conns[leader].send(fetch_key, fetch_v, body)
        return True

    idle: set[int] = set()
    try:
        for leader in set(leader_of.values()):
            conns[leader] = _Conn(*brokers[leader])
            sel.register(conns[leader].sock, selectors.EVENT_READ, leader)
            idle.add(leader)
        while not stop.is_set():
            if failure:
                _say(f"E {failure[0]}")
                return
            for leader in list(idle):
                if send(leader):
                    idle.discard(leader)
            for key, _ in sel.select(timeout=0.1):
                leader = key.data
                for frame in conns[leader].read_frames():
                    conns[leader].pending.pop(response_correlation_id(frame), None)
                    resp = decode_response(fetch_key, fetch_v, frame)
                    if resp["error_code"]:
                        _say(f"E ShareFetch error {resp['error_code']}: {resp.get('error_message')}")
                        return
                    _count_answer(resp)
                    s = sessions[leader]
                    s["epoch"] = 1 if s["epoch"] == 2**31 - 1 else s["epoch"] + 1
                    n = 0
                    for t in resp["responses"]:
                        for pd in t["partitions"]:
                            if pd["error_code"] or pd["acknowledge_error_code"]:
                                _say(f"E partition {pd['partition_index']}: ShareFetch error "
                                     f"{pd['error_code'] or pd['acknowledge_error_code']}")
                                return
                            ranges = [(a["first_offset"], a["last_offset"]) for a in pd["acquired_records"]]
                            if ranges:
                                s["acks"].setdefault(pd["partition_index"], []).extend(ranges)
                                n += sum(last - f + 1 for f, last in ranges)
                    if n:
                        _say(f"B {n}")
                    if not send(leader):
                        idle.add(leader)
    finally:
        for conn in conns.values():
            conn.close()
        sel.close()


MEMBERS: dict[str, Callable[..., None]] = {
    "kclient-records": kclient_records, "kclient-columnar": kclient_columnar, "confluent": confluent,
    "raw-sharefetch": raw_sharefetch,
}


def _prepare(driver: str) -> None:
    """Import the client library before the window opens."""
    if driver == "confluent":
        import confluent_kafka  # noqa: F401
    else:
        import encodings.idna  # noqa: F401   (the codec a host name's lookup loads on first use)
        import kclient.share.consumer  # noqa: F401
        import kclient.protocol  # noqa: F401
        import kcore.groupcodec  # noqa: F401   (loaded by the member's join)
        import kcore.pacemaker  # noqa: F401


def main(argv: list[str]) -> int:
    driver, bootstrap, topic, partitions, group = argv
    _prepare(driver)
    _say("READY")
    if sys.stdin.readline().strip() != "GO":
        return 2
    stop = threading.Event()
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    try:
        MEMBERS[driver](bootstrap, topic, int(partitions), group, stop)
    except Exception as exc:
        _say(f"E {type(exc).__name__}: {exc}".replace("\n", " "))
        return 1
    _write_stats(driver)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Fetch requests built from what changed: once a fetch stream's session is incremental and
nothing else changed, its next request comes from the partitions its last answer moved,
without walking the partitions; any other change (pause, resume, seek, a cleared partition,
a reset, a backoff, a leader change, a read replica, a full prefetch buffer) sends the next
round through the walk. The requests must be exactly what the walk alone would send."""
from __future__ import annotations

import random

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetcher import Fetcher
from kclient.structs import TopicPartition
from kclient.subscription.state import SubscriptionState

from test_fetcher import T, TID, TP0, TP1, TP2, ScriptedClient, batch, fetch_response, make_metadata, partition_data

TPS = (TP0, TP1, TP2)


def leaders_update(md, leaders, epoch):
    md.update({
        "brokers": [{"node_id": 1, "host": "h1", "port": 9092, "rack": None},
                    {"node_id": 2, "host": "h2", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1,
        "topics": [{"error_code": 0, "name": T, "topic_id": TID, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": p, "leader_id": leader,
                                    "leader_epoch": epoch, "replica_nodes": [1, 2], "isr_nodes": [1, 2],
                                    "offline_replicas": []} for p, leader in enumerate(leaders)]}],
    }, 1)


class Side:
    """A Fetcher over a scripted client, counting its walks of the partitions."""

    def __init__(self, leaders=(1, 1, 1), walk_only=False, **config):
        self.clock = FakeClock()
        self.md = make_metadata(leaders=list(leaders))
        self.client = ScriptedClient(self.md)
        self.subs = SubscriptionState("earliest")
        cfg = ConsumerConfig({"bootstrap.servers": "h1:9092", **config})
        self.fetcher = Fetcher(self.client, self.subs, FetchConfig.of(cfg), clock=self.clock)
        self.walks = 0
        candidates = self.subs.fetch_candidates

        def counted(*args):
            self.walks += 1
            return candidates(*args)

        self.subs.fetch_candidates = counted
        if walk_only:
            self.fetcher.requests._send_planned = lambda now: None
        self.subs.assign_from_user(list(TPS))
        for tp in TPS:
            self.subs.seek(tp, 0)


def listed(req) -> dict[TopicPartition, int]:
    return {TopicPartition(t.get("topic", T), p["partition"]): p["fetch_offset"]
            for t in req.body["topics"] for p in t["partitions"]}


def forgotten(req) -> set[TopicPartition]:
    return {TopicPartition(t.get("topic", T), p) for t in req.body["forgotten_topics_data"] for p in t["partitions"]}


def answer(req, data: dict[int, bytes | None], session_id=9, **kw):
    resp = fetch_response([partition_data(p, d) for p, d in data.items()], **kw)
    resp["session_id"] = session_id
    req.future.complete(resp)


def steady(side: Side):
    """Open the session, then one incremental round: the next rounds are built from changes."""
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    answer(req, {0: batch(0, 3)})
    side.fetcher.fetched_records()
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert (req.body["session_id"], req.body["session_epoch"]) == (9, 1) and listed(req) == {TP0: 3}
    return req


def test_steady_rounds_list_only_the_partitions_the_answer_moved_without_a_walk():
    side = Side()
    req = steady(side)
    walks = side.walks
    offsets = {TP0: 3, TP1: 0, TP2: 0}
    for i in range(6):
        tp = TPS[i % 3]
        answer(req, {tp.partition: batch(offsets[tp], 2)})
        offsets[tp] += 2
        recs = side.fetcher.fetched_records()[0]
        assert [r.offset for r in recs[tp]] == list(range(offsets[tp] - 2, offsets[tp]))
        assert side.fetcher.send_fetches() == 1
        (req,) = side.client.take()
        assert req.body["session_epoch"] == 2 + i
        assert listed(req) == {tp: offsets[tp]} and forgotten(req) == set()
    # An answer without records: the next request lists nothing, the session keeps all three.
    answer(req, {})
    assert side.fetcher.send_fetches() == 1
    (req,) = side.client.take()
    assert listed(req) == {} and req.body["session_epoch"] == 8
    assert side.walks == walks
    (handler,) = side.fetcher.fetch_sessions.values()
    assert {tp: p.fetch_offset for tp, p in handler.partitions.items()} == offsets
    assert handler.incremental_requests == 8
    # Still one request in flight per stream: nothing more until it is answered.
    assert side.fetcher.send_fetches() == 0


def seek(side, tp, offset):
    side.subs.seek(tp, offset)
    side.fetcher.clear_partition(tp)


def partition_error(side, req):
    resp = fetch_response([partition_data(1, None, error=Errors.NotLeaderOrFollowerError.errno)])
    resp["session_id"] = 9
    req.future.complete(resp)


# Each change between two rounds, and what the next request lists and forgets.
CHANGES = {
    "pause": (lambda s: s.subs.pause(TP1), {}, {TP1}),
    "seek": (lambda s: seek(s, TP1, 50), {TP1: 50}, set()),
    "clear": (lambda s: s.fetcher.clear_partition(TP0), {}, set()),   # TP0 again from its position, 3
    "reset": (lambda s: s.subs.request_offset_reset(TP2), {}, {TP2}),
    "leader epoch": (lambda s: leaders_update(s.md, [1, 1, 1], 6), {TP0: 3, TP1: 0, TP2: 0}, set()),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_change_between_two_rounds_sends_the_next_through_the_walk(change):
    apply, listing, dropped = CHANGES[change]
    side = Side()
    req = steady(side)
    answer(req, {})
    walks = side.walks
    apply(side)
    assert side.fetcher.send_fetches() == 1
    assert side.walks == walks + 1
    (req,) = side.client.take()
    assert listed(req) == listing and forgotten(req) == dropped


def test_a_paused_partition_is_fetched_again_from_where_it_was_once_resumed():
    side = Side()
    req = steady(side)
    answer(req, {0: batch(3, 2), 1: batch(0, 4)})
    side.subs.pause(TP1)                       # its 4 records wait in the buffer
    assert [r.offset for r in side.fetcher.fetched_records()[0][TP0]] == [3, 4]
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert listed(req) == {TP0: 5} and forgotten(req) == {TP1}
    answer(req, {})
    side.fetcher.send_fetches()                # a steady round without TP1
    (req,) = side.client.take()
    assert listed(req) == {} and forgotten(req) == set()
    answer(req, {})
    side.subs.resume(TP1)
    assert [r.offset for r in side.fetcher.fetched_records()[0][TP1]] == [0, 1, 2, 3]
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert listed(req) == {TP1: 4} and forgotten(req) == set()
    answer(req, {1: batch(4, 1)})
    side.fetcher.fetched_records()
    walks = side.walks
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert listed(req) == {TP1: 5} and side.walks == walks     # steady again


def test_a_backoff_and_a_full_prefetch_buffer_leave_partitions_out_until_they_clear():
    side = Side()
    req = steady(side)
    partition_error(side, req)                 # TP1's leader moved: it backs off
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert forgotten(req) == {TP1}
    answer(req, {})
    side.clock.advance(1000)
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert listed(req) == {TP1: 0}
    # Two answers for TP0 buffered, unread: it waits while the others go on.
    answer(req, {0: batch(3, 2)})
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert listed(req) == {TP0: 5}
    answer(req, {0: batch(5, 2)})
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert forgotten(req) == {TP0}
    answer(req, {})
    assert [r.offset for r in side.fetcher.fetched_records(100)[0][TP0]] == [3, 4, 5, 6]
    side.fetcher.send_fetches()
    (req,) = side.client.take()
    assert listed(req) == {TP0: 7}


def test_a_read_replica_is_fetched_through_the_walk():
    side = Side(**{"client.rack": "r"})
    req = steady(side)
    resp = fetch_response([partition_data(0, None)])
    resp["responses"][0]["partitions"][0]["preferred_read_replica"] = 2
    resp["session_id"] = 9
    req.future.complete(resp)
    walks = side.walks
    assert side.fetcher.send_fetches() == 2
    assert side.walks == walks + 1
    reqs = {r.node: r for r in side.client.take()}
    assert listed(reqs[2]) == {TP0: 3} and forgotten(reqs[1]) == {TP0}


# ---------------------------------------------------------------------- against the walk alone
class Broker:
    """The partitions each fetch session holds, as a broker applies the requests to it."""

    def __init__(self):
        self.sessions: dict[object, dict[TopicPartition, int]] = {}

    def apply(self, req) -> dict[TopicPartition, int]:
        key = req.node if isinstance(req.node, int) else req.node.node_id
        if req.body["session_epoch"] <= 0:
            self.sessions[key] = {}
        parts = self.sessions.setdefault(key, {})
        parts.update(listed(req))
        for tp in forgotten(req):
            parts.pop(tp, None)
        return dict(parts)


def normalized(req):
    body = dict(req.body)
    if body["session_epoch"] > 0:      # an incremental request's order means nothing to the broker
        body["topics"] = sorted((t.get("topic"), sorted(tuple(sorted(p.items())) for p in t["partitions"]))
                                for t in body["topics"])
        body["forgotten_topics_data"] = sorted((t.get("topic"), sorted(t["partitions"]))
                                               for t in body["forgotten_topics_data"])
    node = req.node if isinstance(req.node, int) else req.node.node_id
    return node, req.version, body


@pytest.mark.parametrize("seed", range(6))
def test_requests_match_the_walk_alone_through_random_changes(seed):
    rng = random.Random(seed)
    config = {"fetch.max.in.flight.per.broker": 1 + seed % 2, "retry.backoff.ms": 100,
              "isolation.level": "read_committed" if seed % 3 == 2 else "read_uncommitted"}
    sides = [Side(leaders=(1, 2, 1), **config), Side(leaders=(1, 2, 1), walk_only=True, **config)]
    brokers = [Broker(), Broker()]
    in_flight: list[list] = [[], []]
    planned_rounds = 0
    epoch = 5
    for step in range(300):
        event = rng.choice(["answer"] * 20 + ["drain"] * 10 + ["pause", "resume", "seek", "clear", "reset",
                                                            "error", "lost", "session", "leaders", "time"])
        tp = rng.choice(TPS)
        if event == "answer" and in_flight[0]:
            i = rng.randrange(len(in_flight[0]))
            reqs = [in_flight[0].pop(i), in_flight[1].pop(i)]
            held = brokers[0].apply(reqs[0])
            assert held == brokers[1].apply(reqs[1])
            data = {}
            for part, offset in held.items():
                if rng.random() < 0.5:
                    data[part.partition] = batch(offset, rng.randint(1, 3))
            for req in reqs:
                answer(req, data)
        elif event == "drain":
            n = rng.randint(1, 6)
            got = [{k: [r.offset for r in v] for k, v in s.fetcher.fetched_records(n)[0].items()} for s in sides]
            assert got[0] == got[1]
        elif event in ("error", "lost", "session") and in_flight[0]:
            reqs = [in_flight[0].pop(0), in_flight[1].pop(0)]
            if event == "error":        # the broker took the request; one partition failed
                brokers[0].apply(reqs[0])
                brokers[1].apply(reqs[1])
            for req in reqs:
                if event == "error":
                    resp = fetch_response([partition_data(tp.partition, None,
                                                          error=Errors.NotLeaderOrFollowerError.errno)])
                    resp["session_id"] = 9
                    req.future.complete(resp)
                elif event == "lost":
                    req.future.raise_(Errors.KafkaConnectionError("reset"))
                else:
                    resp = fetch_response([], error=70)
                    req.future.complete(resp)
        elif event == "leaders":
            epoch += 1
            leaders = [rng.choice((1, 2)) for _ in TPS]
            for s in sides:
                leaders_update(s.md, leaders, epoch)
        elif event == "time":
            for s in sides:
                s.clock.advance(150)
        else:
            offset = rng.randrange(100)
            for s in sides:
                if event == "pause":
                    s.subs.pause(tp)
                elif event == "resume":
                    s.subs.resume(tp)
                elif event == "seek":
                    seek(s, tp, offset)
                elif event == "clear":
                    s.fetcher.clear_partition(tp)
                elif event == "reset":
                    s.subs.request_offset_reset(tp)
                    s.fetcher.clear_partition(tp)
        # Resets complete at once here (no ListOffsets): the position is where it was.
        for s in sides:
            for part in s.subs.partitions_needing_reset(s.clock.now_ms()):
                s.subs.seek(part, 0)
            for part in s.subs.partitions_needing_validation(s.clock.now_ms()):
                s.subs.complete_validation(part)
        walks = sides[0].walks
        counts = [s.fetcher.send_fetches() for s in sides]
        assert counts[0] == counts[1]
        if counts[0] and sides[0].walks == walks:
            planned_rounds += 1
        sent = [s.client.take() for s in sides]
        assert sorted(map(normalized, sent[0]), key=repr) == sorted(map(normalized, sent[1]), key=repr), step
        order = [sorted(range(len(sent[k])), key=lambda j, k=k: repr(normalized(sent[k][j]))) for k in (0, 1)]
        for k in (0, 1):
            in_flight[k].extend(sent[k][j] for j in order[k])
    assert planned_rounds >= 15         # the plans were used, not only the walk
    positions = [{tp: s.subs.position(tp) for tp in TPS} for s in sides]
    assert positions[0] == positions[1]

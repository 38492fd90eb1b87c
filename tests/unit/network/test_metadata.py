"""Metadata / Cluster: pure logic over decoded Metadata response dicts (fake time)."""
from __future__ import annotations

import re
import uuid

import pytest

from kclient import errors as Errors
from kclient.network.metadata import Cluster, Metadata, Node

T0 = 1_000_000


def broker(i, host="127.0.0.1", port=None, rack=None):
    return {"node_id": i, "host": host, "port": port or 9000 + i, "rack": rack}


def part(p, leader, epoch=0, err=0, replicas=None):
    replicas = replicas if replicas is not None else [leader]
    return {"error_code": err, "partition_index": p, "leader_id": leader, "leader_epoch": epoch,
            "replica_nodes": replicas, "isr_nodes": replicas, "offline_replicas": []}


def topic(name, parts, err=0, internal=False, topic_id=None):
    return {"error_code": err, "name": name, "topic_id": topic_id, "is_internal": internal,
            "partitions": parts}


def response(topics=(), brokers=None, cluster_id="cid", controller=1, error_code=0):
    return {"throttle_time_ms": 0, "brokers": brokers if brokers is not None else [broker(1), broker(2), broker(3)],
            "cluster_id": cluster_id, "controller_id": controller, "topics": list(topics),
            "error_code": error_code}


def test_bootstrap_cluster_has_placeholder_nodes():
    md = Metadata()
    md.bootstrap([("a", 1), ("b", 2)])
    c = md.cluster
    assert c.is_bootstrap
    assert sorted(c.nodes()) == [Node(-2, "b", 2), Node(-1, "a", 1)]
    assert md.time_to_next_update(T0) == 0  # never refreshed: due at once


def test_update_builds_snapshot():
    md = Metadata()
    tid = uuid.UUID(int=7)
    cl = md.update(response([
        topic("t", [part(1, 2, epoch=4), part(0, 1, epoch=3)], topic_id=tid),
        topic("__consumer_offsets", [part(0, 3)], internal=True),
    ]), T0)
    assert cl is md.cluster and not cl.is_bootstrap
    assert cl.cluster_id == "cid" and cl.controller_id == 1 and cl.controller == Node(1, "127.0.0.1", 9001)
    assert sorted(n.node_id for n in cl.nodes()) == [1, 2, 3]
    ps = cl.partitions_for_topic("t")
    assert [p.partition for p in ps] == [0, 1]  # sorted by partition
    assert cl.partition_count("t") == 2 and cl.partition_count("nope") is None
    assert cl.leader_for(("t", 1)) == Node(2, "127.0.0.1", 9002)
    assert cl.leader_epoch(("t", 0)) == 3
    assert cl.topic_id("t") == tid and cl.topic_name(tid) == "t"
    assert cl.is_internal("__consumer_offsets") and not cl.is_internal("t")
    assert [p.partition for p in cl.partitions_for_node(1)] == [0]
    assert md.update_version == 1
    assert md.last_successful_refresh_ms == T0


def test_zero_topic_id_ignored():
    md = Metadata()
    cl = md.update(response([topic("t", [part(0, 1)], topic_id=uuid.UUID(int=0))]), T0)
    assert cl.topic_id("t") is None


def test_topics_matching_fullmatch_and_internal_exclusion():
    md = Metadata()
    cl = md.update(response([
        topic("orders", [part(0, 1)]), topic("orders-eu", [part(0, 1)]),
        topic("__consumer_offsets", [part(0, 1)], internal=True), topic("x-orders", [part(0, 1)]),
    ]), T0)
    assert cl.topics_matching("orders.*") == {"orders", "orders-eu"}
    assert cl.topics_matching(re.compile(".*")) == {"orders", "orders-eu", "x-orders"}
    assert "__consumer_offsets" in cl.topics_matching(".*", exclude_internal=False)


def test_age_expiry_and_backoff():
    md = Metadata(retry_backoff_ms=100, metadata_max_age_ms=5000)
    md.update(response(), T0)
    assert not md.update_requested()
    assert md.time_to_next_update(T0) == 5000
    assert md.time_to_next_update(T0 + 4999) == 1
    assert md.time_to_next_update(T0 + 5000) == 0
    # an explicit request right after a refresh waits for the backoff, not the age
    md.request_update()
    assert md.time_to_next_update(T0 + 10) == 90
    assert md.time_to_next_update(T0 + 100) == 0


def test_refresh_due_time_follows_every_change():
    """The due time is kept between changes: each change (a request, an answer, a failure,
    new topics, a rebootstrap, a setting) is seen by the next question."""
    md = Metadata(retry_backoff_ms=100, metadata_max_age_ms=5000)
    md.bootstrap([("broker1", 9092)])
    md.update(response(), T0)
    assert md.next_update_ms() == T0 + 5000 and md.time_to_next_update(T0 + 1) == 4999
    md.metadata_max_age_ms = 2000
    assert md.time_to_next_update(T0 + 1) == 1999
    md.retry_backoff_ms = 300
    md.request_update()
    assert md.time_to_next_update(T0 + 1) == 299
    md.update(response(), T0 + 400)
    assert md.time_to_next_update(T0 + 400) == 2000
    md.add_topics("new-topic")                  # not held back by the backoff
    assert md.time_to_next_update(T0 + 400) == 0
    md.failed_update(T0 + 500)
    assert md.time_to_next_update(T0 + 500) == 300
    md.update(response(), T0 + 600)
    assert md.update_last_seen_epoch_if_newer(("t", 0), 5)
    assert md.time_to_next_update(T0 + 600) == 300
    md.rebootstrap()
    assert md.time_to_next_update(T0 + 600) == 0


def test_failed_updates_back_off_exponentially_capped():
    md = Metadata(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    md.request_update()
    now = T0
    waits = []
    for _ in range(6):
        md.failed_update(now, Errors.KafkaConnectionError("x"))
        waits.append(md.time_to_next_update(now))
    assert waits == [100, 200, 400, 800, 1000, 1000]
    md.update(response(), now + 1000)
    md.request_update()
    assert md.time_to_next_update(now + 1000) == 100  # success resets the backoff


def test_request_update_returns_version_and_update_bumps_it():
    md = Metadata()
    v = md.request_update()
    md.update(response(), T0)
    assert md.update_version == v + 1


def test_empty_broker_list_is_a_failed_refresh():
    md = Metadata()
    md.bootstrap([("h", 1)])
    md.update(response(brokers=[]), T0)
    assert md.cluster.is_bootstrap and md.update_version == 0
    assert md.time_to_next_update(T0) == 100


def test_top_level_error_raises_and_counts_as_failure():
    md = Metadata()
    with pytest.raises(Errors.NotControllerError):
        md.update(response(error_code=41), T0)
    assert md.update_version == 0 and md.time_to_next_update(T0) > 0


def test_retriable_topic_errors_request_another_update():
    md = Metadata()
    md.set_topics(["new", "ok"])
    cl = md.update(response([topic("new", [], err=5), topic("ok", [part(0, 1)])]), T0)
    assert cl.topic_errors == {"new": 5}
    assert "new" not in cl.topics() and "ok" in cl.topics()
    assert md.update_requested()
    assert md.time_to_next_update(T0) == 100
    md.update(response([topic("new", [], err=5), topic("ok", [part(0, 1)])]), T0 + 100)
    assert md.time_to_next_update(T0 + 100) == 200  # repeated incomplete answers back off
    cl = md.update(response([topic("new", [part(0, 2)]), topic("ok", [part(0, 1)])]), T0 + 300)
    assert not md.update_requested() and cl.partition_count("new") == 1


def test_untracked_topic_errors_do_not_force_refresh():
    md = Metadata()
    md.set_topics(["ok"])
    md.update(response([topic("other", [], err=3), topic("ok", [part(0, 1)])]), T0)
    assert not md.update_requested()


def test_partition_without_leader_requests_update():
    md = Metadata()
    md.set_topics(["t"])
    cl = md.update(response([topic("t", [part(0, -1, err=5), part(1, 2)])]), T0)
    assert cl.leader_for(("t", 0)) is None and cl.leader_for(("t", 1)).node_id == 2
    assert [p.partition for p in cl.available_partitions_for_topic("t")] == [1]
    assert md.update_requested()


def test_authorization_and_invalid_topic_errors_raised_once():
    md = Metadata()
    md.set_topics(["secret", "bad name"])
    md.update(response([topic("secret", [], err=29), topic("bad name", [], err=17)]), T0)
    with pytest.raises(Errors.TopicAuthorizationFailedError, match="secret"):
        md.maybe_raise_exception()
    md.maybe_raise_exception()  # reported once
    assert md.cluster.unauthorized_topics == {"secret"} and md.cluster.invalid_topics == {"bad name"}


def test_stale_leader_epoch_keeps_newer_cached_partition():
    md = Metadata()
    md.set_topics(["t"])
    md.update(response([topic("t", [part(0, 2, epoch=5), part(1, 1, epoch=1)])]), T0)
    # a lagging broker still reports the old leader 1 at epoch 4 for partition 0
    cl = md.update(response([topic("t", [part(0, 1, epoch=4), part(1, 3, epoch=2)])]), T0 + 200)
    assert cl.partition(("t", 0)).leader == 2 and cl.leader_epoch(("t", 0)) == 5
    assert cl.partition(("t", 1)).leader == 3 and cl.leader_epoch(("t", 1)) == 2  # newer: taken
    assert md.update_requested()  # stale answer: ask again
    cl = md.update(response([topic("t", [part(0, 3, epoch=6), part(1, 3, epoch=2)])]), T0 + 400)
    assert cl.partition(("t", 0)).leader == 3 and not md.update_requested()


def test_equal_epoch_accepted():
    md = Metadata()
    md.update(response([topic("t", [part(0, 2, epoch=5)])]), T0)
    cl = md.update(response([topic("t", [part(0, 2, epoch=5, replicas=[2, 3])])]), T0 + 1)
    assert cl.partition(("t", 0)).replicas == (2, 3)


def test_epoch_seen_in_fetch_response_is_honoured():
    md = Metadata()
    md.set_topics(["t"])
    md.update(response([topic("t", [part(0, 1, epoch=3)])]), T0)
    assert md.update_last_seen_epoch_if_newer(("t", 0), 7)
    assert not md.update_last_seen_epoch_if_newer(("t", 0), 6)
    assert md.update_requested() and md.last_seen_leader_epoch(("t", 0)) == 7
    # a refresh still at epoch 3: partition kept (count unchanged), leader unknown
    cl = md.update(response([topic("t", [part(0, 1, epoch=3)])]), T0 + 100)
    assert cl.partition_count("t") == 1
    # cached epoch 3 equals the stale one: the cached (older) info is kept as is
    assert cl.partition(("t", 0)).leader_epoch == 3 and md.update_requested()


def test_epoch_newer_than_cache_and_no_cache_marks_leader_unknown():
    md = Metadata()
    md.set_topics(["t"])
    md.update_last_seen_epoch_if_newer(("t", 0), 9)
    cl = md.update(response([topic("t", [part(0, 1, epoch=3)])]), T0)
    assert cl.partition(("t", 0)).leader == -1 and cl.leader_for(("t", 0)) is None
    assert cl.partition_count("t") == 1


def test_metadata_without_epochs_replaces_freely():
    md = Metadata()
    md.update(response([topic("t", [part(0, 1, epoch=-1)])]), T0)
    cl = md.update(response([topic("t", [part(0, 2, epoch=-1)])]), T0 + 1)
    assert cl.leader_for(("t", 0)).node_id == 2 and cl.leader_epoch(("t", 0)) is None


def test_listeners_get_snapshots_and_errors_are_contained():
    md = Metadata()
    seen = []

    def bad(_):
        raise RuntimeError("listener bug")

    md.add_listener(bad)
    md.add_listener(seen.append)
    c1 = md.update(response([topic("t", [part(0, 1)])]), T0)
    c2 = md.update(response([topic("t", [part(0, 1), part(1, 2)])]), T0 + 1)
    assert seen == [c1, c2]
    assert c1.partition_count("t") == 1 and c2.partition_count("t") == 2  # snapshots are immutable
    md.remove_listener(seen.append)
    md.update(response(), T0 + 2)
    assert len(seen) == 2


def test_request_body_tracks_topics():
    md = Metadata(allow_auto_topic_creation=False)
    assert md.build_request_body() == {"topics": [], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False}
    md.update(response(), T0)
    md.add_topics("b", "a")
    assert md.update_requested()
    assert [t["name"] for t in md.build_request_body()["topics"]] == ["a", "b"]
    md.set_need_all_topics(True)
    assert md.build_request_body()["topics"] is None


def test_a_new_topic_is_refreshed_at_once_then_incomplete_answers_back_off():
    md = Metadata(retry_backoff_ms=100)
    md.set_topics(["a"])
    md.update(response([topic("a", [part(0, 1)])]), T0)
    assert md.time_to_next_update(T0 + 1) > 0              # fresh: nothing due
    md.add_topics("b")                                      # new: no backoff after the last refresh
    assert md.update_requested() and md.time_to_next_update(T0 + 1) == 0
    md.update(response([topic("a", [part(0, 1)]), topic("b", [], err=3)]), T0 + 2)
    assert md.update_requested() and md.time_to_next_update(T0 + 2) == 100   # not there yet: back off
    md.add_topics("b")                                      # known already: still backing off
    assert md.time_to_next_update(T0 + 2) == 100
    md.set_topics(["a", "b", "c"])                          # another new one: at once again
    assert md.time_to_next_update(T0 + 3) == 0
    md.update(response([topic(t, [part(0, 1)]) for t in "abc"]), T0 + 4)
    md.set_need_all_topics(True)                            # a pattern subscription: at once
    assert md.time_to_next_update(T0 + 5) == 0


def test_an_immediate_update_skips_the_backoff_after_success_only():
    md = Metadata(retry_backoff_ms=100)
    md.set_topics(["a"])
    md.update(response([topic("a", [part(0, 1)])]), T0)
    md.request_update()
    assert md.time_to_next_update(T0 + 1) == 99              # an ordinary request waits the backoff
    md.request_immediate_update()
    assert md.update_requested() and md.time_to_next_update(T0 + 1) == 0
    md.failed_update(T0 + 2)
    md.request_immediate_update()                            # after a failure the backoff holds
    assert md.time_to_next_update(T0 + 3) > 0


def test_adding_known_topic_does_not_request_update():
    md = Metadata()
    md.set_topics(["a"])
    md.update(response([topic("a", [part(0, 1)])]), T0)
    md.add_topics("a")
    md.set_topics(["a"])
    assert not md.update_requested()


def test_node_address_formats_ipv6():
    assert Node(1, "::1", 9092).address == "[::1]:9092"
    assert Node(1, "h", 9092).address == "h:9092"
    assert Cluster.empty().nodes() == []


def test_request_update_for_error_only_for_stale_routing_errors():
    md = Metadata()
    md.update(response(), T0)
    assert not md.request_update_for_error(0)
    assert not md.request_update_for_error(Errors.RebalanceInProgressError())
    assert not md.update_requested()
    assert md.request_update_for_error(6)                                   # NOT_LEADER_OR_FOLLOWER
    md.update(response(), T0 + 100)
    assert md.request_update_for_error(Errors.UnknownTopicOrPartitionError)
    md.update(response(), T0 + 200)
    assert md.request_update_for_error(Errors.KafkaConnectionError("lost"))
    assert md.update_requested()

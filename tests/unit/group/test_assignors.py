"""Assignors: validity, balance, stickiness and determinism (hypothesis), known answers, registry."""
from collections import Counter
from contextlib import contextmanager
import random

from hypothesis import given, settings, strategies as st
import pytest

from kclient.group.assignors import (
    ASSIGNORS,
    DEFAULT_PARTITION_ASSIGNMENT_STRATEGY,
    AbstractPartitionAssignor,
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    build_assignors,
)
from kclient.group.assignors.sticky import (
    MemberData,
    decode_sticky_user_data,
    encode_sticky_user_data,
    sticky_assign,
)
from kclient.group.classic_embedded_protocol import deserialize_subscription, serialize_subscription
from kclient.errors import ConfigurationError
from kclient.structs import TopicPartition as TP

ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]
TOPICS = ["t0", "t1", "t2", "t3"]


def owners(result):
    """partition -> member; fails if a partition is assigned twice."""
    owner = {}
    for member, assignment in result.items():
        for tp in assignment.partitions:
            assert tp not in owner, f"{tp} assigned to {owner[tp]} and {member}"
            owner[tp] = member
    return owner


def expected_partitions(ppt, subs):
    wanted = {t for s in subs.values() for t in s.topics}
    return {TP(t, p) for t in wanted if t in ppt for p in range(ppt[t])}


def counts(result):
    return [len(a.partitions) for a in result.values()]


def sticky_subs(ppt, topics_of, owned, generation=1):
    """Subscriptions carrying previous ownership the way each sticky assignor reads it."""
    return {
        m: Subscription(
            topics=sorted(topics_of[m]),
            user_data=encode_sticky_user_data(owned.get(m, ()), generation),
            owned_partitions=owned.get(m, ()),
            generation_id=generation,
        )
        for m in topics_of
    }


# --------------------------------------------------------------------------- strategies
@st.composite
def group(draw, identical=False, min_members=1, max_members=7):
    ppt = {t: draw(st.integers(0, 10)) for t in TOPICS[: draw(st.integers(1, len(TOPICS)))]}
    # A topic some member wants but metadata does not know yet.
    universe = sorted(ppt) + (["missing"] if draw(st.booleans()) else [])
    n = draw(st.integers(min_members, max_members))
    members = [f"m{i:02d}" for i in draw(st.lists(st.integers(0, 99), min_size=n, max_size=n, unique=True))]
    if identical:
        topics = draw(st.sets(st.sampled_from(universe), min_size=1))
        topics_of = {m: frozenset(topics) for m in members}
    else:
        topics_of = {m: frozenset(draw(st.sets(st.sampled_from(universe), min_size=1))) for m in members}
    static = {m: f"inst-{draw(st.integers(0, 50))}-{m}" for m in members if draw(st.booleans())}
    subs = {
        m: Subscription(topics=sorted(topics_of[m]), group_instance_id=static.get(m)) for m in members
    }
    return ppt, subs


def run(cls, ppt, subs):
    return cls().assign(ppt, subs)


STICKY = [StickyAssignor, CooperativeStickyAssignor]


@contextmanager
def checking(cls):
    """One assignor's check in a property that checks several on the same drawn group (drawing
    it is most of the time): a failure names the assignor."""
    try:
        yield
    except AssertionError as exc:
        exc.add_note(f"assignor: {cls.name}")
        raise


# --------------------------------------------------------------------------- properties
@settings(max_examples=120, deadline=None)
@given(g=group())
def test_every_partition_goes_to_exactly_one_subscribed_member(g):
    ppt, subs = g
    for cls in ALL:
        with checking(cls):
            result = run(cls, ppt, subs)
            assert set(result) == set(subs)
            owner = owners(result)
            assert set(owner) == expected_partitions(ppt, subs)
            for tp, m in owner.items():
                assert tp.topic in subs[m].topics


@settings(max_examples=120, deadline=None)
@given(g=group(identical=True))
def test_identical_subscriptions_are_balanced_within_one(g):
    ppt, subs = g
    for cls in [RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]:
        with checking(cls):
            c = counts(run(cls, ppt, subs))
            assert max(c) - min(c) <= 1


@settings(max_examples=120, deadline=None)
@given(g=group(identical=True))
def test_range_balances_each_topic_within_one(g):
    ppt, subs = g
    result = run(RangeAssignor, ppt, subs)
    for topic in ppt:
        per_member = Counter({m: 0 for m in subs})
        for m, a in result.items():
            per_member[m] += sum(1 for tp in a.partitions if tp.topic == topic)
        if topic in next(iter(subs.values())).topics:
            assert max(per_member.values()) - min(per_member.values()) <= 1


@settings(max_examples=120, deadline=None)
@given(g=group())
def test_sticky_general_case_leaves_no_gap_a_move_could_narrow(g):
    ppt, subs = g
    for cls in STICKY:
        with checking(cls):
            result = run(cls, ppt, subs)
            size = {m: len(a.partitions) for m, a in result.items()}
            for donor, a in result.items():
                for tp in a.partitions:
                    for m, s in subs.items():
                        if m != donor and tp.topic in s.topics:
                            assert size[m] >= size[donor] - 1, (m, donor, tp)


@settings(max_examples=80, deadline=None)
@given(g=group(), seed=st.integers(0, 2**32 - 1))
def test_output_is_deterministic_whatever_the_member_order(g, seed):
    ppt, subs = g
    shuffled = list(subs.items())
    random.Random(seed).shuffle(shuffled)
    for cls in ALL:
        with checking(cls):
            assert run(cls, ppt, subs) == run(cls, ppt, dict(shuffled))


def max_retained(n_partitions, owned_counts):
    """Most partitions that can stay put in a balanced assignment (identical subscriptions)."""
    quota, extra = divmod(n_partitions, len(owned_counts))
    keep = sum(min(o, quota) for o in owned_counts)
    return keep + min(extra, sum(1 for o in owned_counts if o > quota))


@st.composite
def membership_change(draw):
    """Identical subscriptions; arbitrary previous ownership by old members; some leave,
    some join."""
    ppt = {t: draw(st.integers(0, 12)) for t in TOPICS[: draw(st.integers(1, 3))]}
    topics = frozenset(ppt)
    old = [f"old{i}" for i in range(draw(st.integers(1, 6)))]
    parts = sorted(TP(t, p) for t in ppt for p in range(ppt[t]))
    prev = {tp: draw(st.sampled_from(old + [None])) for tp in parts}
    leaving = set(draw(st.sets(st.sampled_from(old), max_size=len(old) - 1)))
    joining = [f"new{i}" for i in range(draw(st.integers(0, 3)))]
    members = [m for m in old if m not in leaving] + joining
    owned = {m: [tp for tp, o in prev.items() if o == m] for m in members}
    return ppt, {m: topics for m in members}, owned, prev


def moved(prev, result):
    owner = owners(result)
    return sum(1 for tp, o in prev.items() if owner.get(tp) != o)


@pytest.mark.parametrize("cls", [StickyAssignor, CooperativeStickyAssignor], ids=lambda c: c.name)
@settings(max_examples=150, deadline=None)
@given(change=membership_change())
def test_sticky_moves_the_fewest_partitions_possible(cls, change):
    ppt, topics_of, owned, prev = change
    subs = sticky_subs(ppt, topics_of, owned)
    # The cooperative assignor withholds moving partitions; the placement it converges to
    # is the sticky one, which is what the stickiness bound is about.
    topics = {m: frozenset(s.topics) for m, s in subs.items()}
    data = {m: MemberData(tuple(owned[m]), 1) for m in subs}
    result = {m: Assignment(p) for m, p in sticky_assign(ppt, topics, data).items()}
    if cls is StickyAssignor:
        assert run(cls, ppt, subs) == result
    n = len(prev)
    minimum = n - max_retained(n, [len(owned[m]) for m in subs])
    assert moved(prev, result) == minimum
    assert moved(prev, result) <= moved(prev, run(RoundRobinAssignor, ppt, subs))
    by_range = run(RangeAssignor, ppt, subs)
    if max(counts(by_range)) - min(counts(by_range)) <= 1:  # range is only sometimes balanced
        assert moved(prev, result) <= moved(prev, by_range)


@settings(max_examples=80, deadline=None)
@given(g=group())
def test_sticky_reassigning_its_own_result_moves_nothing(g):
    ppt, subs = g
    topics_of = {m: frozenset(s.topics) for m, s in subs.items()}
    for cls in STICKY:
        with checking(cls):
            first = run(cls, ppt, subs)
            again = run(cls, ppt, sticky_subs(ppt, topics_of, {m: a.partitions for m, a in first.items()}))
            assert again == first


@settings(max_examples=120, deadline=None)
@given(change=membership_change())
def test_cooperative_never_hands_over_a_partition_its_owner_still_holds(change):
    ppt, topics_of, owned, prev = change
    subs = sticky_subs(ppt, topics_of, owned)
    first = run(CooperativeStickyAssignor, ppt, subs)
    for m, a in first.items():
        for tp in a.partitions:
            assert tp in owned[m] or not any(tp in owned[o] for o in subs if o != m)
    # Round two: members have revoked what they lost; the assignment is complete and balanced.
    kept = {m: [tp for tp in owned[m] if tp in first[m].partitions] for m in subs}
    second = run(CooperativeStickyAssignor, ppt, sticky_subs(ppt, topics_of, kept, generation=2))
    assert set(owners(second)) == set(prev)
    assert max(counts(second)) - min(counts(second)) <= 1
    for m in subs:  # nothing kept in round one is taken away in round two
        assert set(kept[m]) <= set(second[m].partitions)


# --------------------------------------------------------------------------- known answers
def subs_for(topics_of, **kw):
    return {m: Subscription(topics=t, **kw) for m, t in topics_of.items()}


def names(result):
    return {m: [f"{tp.topic}p{tp.partition}" for tp in a.partitions] for m, a in result.items()}


def test_range_known_answer_and_extra_partitions_to_first_members():
    subs = subs_for({"c0": ["t0", "t1"], "c1": ["t0", "t1"], "c2": ["t1"]})
    assert names(run(RangeAssignor, {"t0": 3, "t1": 5}, subs)) == {
        "c0": ["t0p0", "t0p1", "t1p0", "t1p1"],
        "c1": ["t0p2", "t1p2", "t1p3"],
        "c2": ["t1p4"],
    }


def test_range_orders_static_members_by_group_instance_id_first():
    subs = {
        "a-dynamic": Subscription(["t"]),
        "z-member": Subscription(["t"], group_instance_id="instance-1"),
        "b-member": Subscription(["t"], group_instance_id="instance-2"),
    }
    assert names(run(RangeAssignor, {"t": 3}, subs)) == {
        "z-member": ["tp0"], "b-member": ["tp1"], "a-dynamic": ["tp2"],
    }


def test_roundrobin_skips_members_not_subscribed():
    subs = subs_for({"c0": ["t0"], "c1": ["t0", "t1"], "c2": ["t0", "t1", "t2"]})
    assert names(run(RoundRobinAssignor, {"t0": 1, "t1": 2, "t2": 3}, subs)) == {
        "c0": ["t0p0"], "c1": ["t1p0"], "c2": ["t1p1", "t2p0", "t2p1", "t2p2"],
    }


def test_sticky_example_1_from_kafka_docs():
    # Kafka's StickyAssignor javadoc, example 1 (fresh assignment equals round robin's).
    ppt = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    subs = subs_for({c: list(ppt) for c in ("C0", "C1", "C2")})
    fresh = run(StickyAssignor, ppt, subs)
    assert names(fresh) == {
        "C0": ["t0p0", "t1p1", "t3p0"], "C1": ["t0p1", "t2p0", "t3p1"], "C2": ["t1p0", "t2p1"],
    }
    # C1 leaves: C0 and C2 keep everything they had.
    sticky = StickyAssignor()
    remaining = {}
    for c in ("C0", "C2"):
        sticky.on_assignment(fresh[c], generation=1)
        remaining[c] = Subscription(topics=list(ppt), user_data=sticky.subscription_user_data(set(ppt)))
    after = run(StickyAssignor, ppt, remaining)
    assert set(fresh["C0"].partitions) <= set(after["C0"].partitions)
    assert set(fresh["C2"].partitions) <= set(after["C2"].partitions)
    assert counts(after) == [4, 4]


def test_sticky_example_2_from_kafka_docs():
    ppt = {"t0": 1, "t1": 2, "t2": 3}
    topics_of = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    fresh = run(StickyAssignor, ppt, subs_for(topics_of))
    assert names(fresh) == {"C0": ["t0p0"], "C1": ["t1p0", "t1p1"], "C2": ["t2p0", "t2p1", "t2p2"]}
    del topics_of["C0"]
    after = sticky_assign(
        ppt, {m: frozenset(t) for m, t in topics_of.items()},
        {m: MemberData(fresh[m].partitions, 1) for m in topics_of},
    )
    assert after == {
        "C1": [TP("t0", 0), TP("t1", 0), TP("t1", 1)],
        "C2": [TP("t2", 0), TP("t2", 1), TP("t2", 2)],
    }


def test_claims_are_resolved_by_generation():
    ppt = {"t": 4}
    topics = {"a": frozenset({"t"}), "b": frozenset({"t"})}
    # a (generation 5) and b (generation 4) both claim t-0: a keeps it.
    res = sticky_assign(ppt, topics, {"a": MemberData((TP("t", 0),), 5), "b": MemberData((TP("t", 0), TP("t", 1)), 4)})
    assert TP("t", 0) in res["a"] and TP("t", 1) in res["b"]
    # Same generation: neither's claim counts; the partition still goes to exactly one member.
    res = sticky_assign(ppt, topics, {"a": MemberData((TP("t", 0), TP("t", 2)), 5), "b": MemberData((TP("t", 0), TP("t", 3)), 5)})
    assert TP("t", 2) in res["a"] and TP("t", 3) in res["b"]
    assert sum(TP("t", 0) in p for p in res.values()) == 1


def test_claims_on_unsubscribed_or_vanished_partitions_are_dropped():
    ppt = {"t": 2, "u": 2}
    topics = {"a": frozenset({"t"}), "b": frozenset({"t", "u"})}
    res = sticky_assign(ppt, topics, {
        "a": MemberData((TP("u", 0), TP("t", 7)), 1),  # a left u; t-7 no longer exists
        "b": MemberData((), 1),
    })
    assert TP("u", 0) in res["b"] and all(tp.topic == "t" for tp in res["a"])


def test_cooperative_withholds_partition_until_revoked():
    ppt = {"t": 4}
    owned = {"a": [TP("t", i) for i in range(4)], "b": []}
    subs = sticky_subs(ppt, {"a": {"t"}, "b": {"t"}}, owned)
    first = run(CooperativeStickyAssignor, ppt, subs)
    assert len(first["a"].partitions) == 2 and first["b"].partitions == ()
    kept = {"a": list(first["a"].partitions), "b": []}
    second = run(CooperativeStickyAssignor, ppt, sticky_subs(ppt, {"a": {"t"}, "b": {"t"}}, kept, 2))
    assert second["a"] == first["a"] and len(second["b"].partitions) == 2


def test_partitions_of_departed_members_are_assigned_at_once_by_cooperative():
    ppt = {"t": 2}
    subs = sticky_subs(ppt, {"b": {"t"}}, {"b": []})
    assert len(run(CooperativeStickyAssignor, ppt, subs)["b"].partitions) == 2


def test_empty_group_and_empty_topics():
    for cls in ALL:
        assert run(cls, {"t": 3}, {}) == {}
        assert run(cls, {"t": 0}, subs_for({"a": ["t"]})) == {"a": Assignment()}
        assert run(cls, {}, subs_for({"a": ["t"]})) == {"a": Assignment()}


# --------------------------------------------------------------------------- metadata / user data
def test_sticky_user_data_known_bytes_and_fallbacks():
    data = encode_sticky_user_data([TP("b", 1), TP("a", 0), TP("a", 3)], 9)
    assert data == bytes.fromhex(
        "00000002" "000161" "00000002" "00000000" "00000003" "000162" "00000001" "00000001" "00000009"
    )
    assert decode_sticky_user_data(data) == MemberData((TP("a", 0), TP("a", 3), TP("b", 1)), 9)
    assert decode_sticky_user_data(data[:-4]) == MemberData((TP("a", 0), TP("a", 3), TP("b", 1)), -1)  # v0
    assert decode_sticky_user_data(b"\xff\xff\xff\xff") == MemberData()  # garbage: owns nothing
    assert decode_sticky_user_data(None) == MemberData()


def test_sticky_metadata_carries_last_assignment_in_user_data():
    a = StickyAssignor()
    assert a.metadata({"t"}, [], -1).user_data is None
    a.on_assignment(Assignment([TP("t", 1)]), generation=3)
    sub = a.metadata({"t"}, [], 3)
    assert decode_sticky_user_data(sub.user_data) == MemberData((TP("t", 1),), 3)


def test_cooperative_metadata_carries_generation_and_owned_partitions():
    a = CooperativeStickyAssignor()
    a.on_assignment(Assignment([TP("t", 0)]), generation=12)
    sub = a.metadata({"t", "u"}, [TP("t", 0)], 12, rack_id="rack-a")
    assert sub.user_data == (12).to_bytes(4, "big")
    back = deserialize_subscription(serialize_subscription(sub, a.version))
    assert back.topics == ("t", "u") and back.owned_partitions == (TP("t", 0),)
    assert back.generation_id == 12 and back.rack_id == "rack-a"
    assert RebalanceProtocol.COOPERATIVE in a.supported_protocols
    assert RangeAssignor.supported_protocols == (RebalanceProtocol.EAGER,)


def test_cooperative_reads_generation_from_user_data_for_old_protocol_versions():
    a = CooperativeStickyAssignor()
    sub = Subscription(["t"], user_data=(4).to_bytes(4, "big"), owned_partitions=[TP("t", 0)], generation_id=-1)
    assert a._member_data(sub) == MemberData((TP("t", 0),), 4)
    assert a._member_data(Subscription(["t"], user_data=b"\x01")) == MemberData((), -1)


# --------------------------------------------------------------------------- registry
def test_default_strategy_is_kafkas():
    assert [a.name for a in build_assignors()] == ["range", "cooperative-sticky"]
    assert DEFAULT_PARTITION_ASSIGNMENT_STRATEGY == ("range", "cooperative-sticky")


def test_registry_accepts_names_strings_classes_instances_and_java_names():
    inst = StickyAssignor()
    built = build_assignors([
        "roundrobin", RangeAssignor, inst, "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    ])
    assert [a.name for a in built] == ["roundrobin", "range", "sticky", "cooperative-sticky"]
    assert built[2] is inst
    assert [a.name for a in build_assignors("sticky, range")] == ["sticky", "range"]
    assert set(ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky"}


def test_registry_maps_kafka_python_style_classes_by_name():
    class ForeignRoundRobin:  # shaped like kafka-python's assignor classes
        name = "roundrobin"

    (a,) = build_assignors([ForeignRoundRobin])
    assert isinstance(a, RoundRobinAssignor)


def test_registry_accepts_custom_subclasses():
    class Everything(AbstractPartitionAssignor):
        name = "everything-to-first"

        def assign(self, partitions_per_topic, subscriptions):
            first = sorted(subscriptions)[0]
            return {m: Assignment([TP(t, p) for t, n in partitions_per_topic.items() for p in range(n)] if m == first else [])
                    for m in subscriptions}

    (a,) = build_assignors([Everything])
    assert a.assign({"t": 2}, subs_for({"x": ["t"], "y": ["t"]}))["x"].partitions == (TP("t", 0), TP("t", 1))


@pytest.mark.parametrize("bad", [["nope"], [], "", None, [object], ["range", "range"], 42])
def test_registry_errors_name_the_setting(bad):
    with pytest.raises(ConfigurationError, match="partition.assignment.strategy"):
        build_assignors(bad)

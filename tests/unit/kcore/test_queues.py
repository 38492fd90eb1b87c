"""kcore.queues (mechanisms §10 unsent, §11 in-flight) against plain deque/list/dict models."""
from __future__ import annotations

import gc
import random
import weakref
from collections import deque

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kclient.errors import (ConfigurationError, CorrelationIdMismatchError,
                            IllegalArgumentError, IllegalStateError, ProtocolError)
from kcore.queues import InFlightRequests, UnsentQueue

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def clamp(x):
    return max(INT64_MIN, min(INT64_MAX, x))


def outcome(fn, *args):
    """('ok', value) or ('err', exception type): lets a rule compare real and model."""
    try:
        return ("ok", fn(*args))
    except Exception as e:      # noqa: BLE001 - the type is what is compared
        return ("err", type(e))


class Req:
    __slots__ = ("node", "n", "payload", "__weakref__")

    def __init__(self, node, n):
        self.node, self.n, self.payload = node, n, None

    def __repr__(self):
        return f"Req({self.node!r}, {self.n})"


# ======================================================================= unsent
class ModelUnsent:
    def __init__(self):
        self.q = {}              # node -> deque[(request, stamp)]

    def put(self, node, req, now):
        d = self.q.setdefault(node, deque())
        d.append((req, max(now, d[-1][1]) if d else now))   # stamps never go back in a node

    def drain(self, node, max_requests=None):
        if max_requests is not None and max_requests < 0:
            raise IllegalArgumentError("max_requests")
        d = self.q.get(node, deque())
        n = len(d) if max_requests is None else min(len(d), max_requests)
        return [d.popleft()[0] for _ in range(n)]

    def remove_expired(self, now, timeout):
        if timeout < 0:
            raise IllegalArgumentError("timeout")
        out = {}
        for node, d in self.q.items():      # brute force: look at every request
            gone = [r for r, stamp in d if now - stamp > timeout]
            if gone:
                out[node] = gone
                self.q[node] = deque((r, s) for r, s in d if not now - s > timeout)
        return out

    def remove_node(self, node):
        return [r for r, _ in self.q.pop(node, ())]

    def requests(self, node):
        return [r for r, _ in self.q.get(node, ())]

    def peek_oldest_ms(self, node):
        d = self.q.get(node)
        return d[0][1] if d else None

    def pending_count(self, node=None):
        if node is None:
            return sum(len(d) for d in self.q.values())
        return len(self.q.get(node, ()))

    def has_pending(self, node=None):
        return self.pending_count(node) > 0

    def nodes(self):
        return sorted((n for n, d in self.q.items() if d), key=repr)


def grouped_by_node(requests):
    """Check requests of one node are contiguous; return {node: [requests in order]}."""
    out, seen_done = {}, set()
    last = object()
    for r in requests:
        if r.node != last:
            assert r.node not in seen_done, "a node's expired requests must be contiguous"
            if last in out:
                seen_done.add(last)
            last = r.node
        out.setdefault(r.node, []).append(r)
    return out


def assert_unsent_same(real, model, nodes):
    assert len(real) == model.pending_count()
    assert real.pending_count() == model.pending_count()
    assert real.has_pending() == model.has_pending()
    assert sorted(real.nodes(), key=repr) == model.nodes()
    for n in nodes:
        assert real.pending_count(n) == model.pending_count(n)
        assert real.has_pending(n) == model.has_pending(n)
        assert real.peek_oldest_ms(n) == model.peek_oldest_ms(n)
        assert real.requests(n) == model.requests(n)


times = st.one_of(st.integers(-20, 60), st.sampled_from([INT64_MIN, INT64_MAX, 2**62, -(2**62)]),
                  st.integers(INT64_MIN, INT64_MAX))
timeouts = st.one_of(st.integers(0, 30), st.sampled_from([0, INT64_MAX, 2**62]),
                     st.integers(-3, -1))


class UnsentMachine(RuleBasedStateMachine):
    NODES = [0, 1, 2, "coordinator"]

    def __init__(self):
        super().__init__()
        self.real, self.model = UnsentQueue(), ModelUnsent()
        self.n = 0

    @rule(node=st.sampled_from(NODES), now=times)
    def put(self, node, now):
        self.n += 1
        r = Req(node, self.n)
        self.real.put(node, r, now)
        self.model.put(node, r, now)

    @rule(node=st.sampled_from(NODES), limit=st.one_of(st.none(), st.integers(-1, 4)))
    def drain(self, node, limit):
        assert outcome(self.real.drain, node, limit) == outcome(self.model.drain, node, limit)

    @rule(now=times, timeout=timeouts)
    def remove_expired(self, now, timeout):
        real = outcome(self.real.remove_expired, now, timeout)
        model = outcome(self.model.remove_expired, now, timeout)
        if real[0] == "ok":
            real = ("ok", grouped_by_node(real[1]))
        assert real == model

    @rule(node=st.sampled_from(NODES + [99]))
    def remove_node(self, node):
        assert self.real.remove_node(node) == self.model.remove_node(node)

    @invariant()
    def same_state(self):
        assert_unsent_same(self.real, self.model, self.NODES + [99])


TestUnsentStateful = UnsentMachine.TestCase
TestUnsentStateful.settings = settings(max_examples=150, stateful_step_count=50, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("seed", range(3))
def test_unsent_random_sequences_match_model(seed):
    # Bursts of puts grow rings whose head has moved (wrapped copies on growth).
    rng = random.Random(seed)
    real, model = UnsentQueue(), ModelUnsent()
    nodes, now, n = list(range(5)), 0, 0
    for step in range(6000):
        op = rng.random()
        if op < 0.6:
            for _ in range(rng.randrange(1, 30) if step % 50 == 0 else 1):
                n += 1
                node = rng.choice(nodes)
                r = Req(node, n)
                t = now - rng.randrange(0, 5)          # some callers pass a stale now
                real.put(node, r, t)
                model.put(node, r, t)
        elif op < 0.8:
            node, limit = rng.choice(nodes), rng.choice([None, 1, 2, 7])
            assert real.drain(node, limit) == model.drain(node, limit)
        elif op < 0.97:
            now += rng.randrange(0, 10)
            timeout = rng.randrange(0, 40)
            assert grouped_by_node(real.remove_expired(now, timeout)) == \
                model.remove_expired(now, timeout)
        else:
            node = rng.choice(nodes)
            assert real.remove_node(node) == model.remove_node(node)
        assert_unsent_same(real, model, nodes)


def test_unsent_fifo_and_stamps():
    q = UnsentQueue()
    a, b, c = Req(1, 1), Req(1, 2), Req(2, 3)
    q.put(1, a, 10)
    q.put(1, b, 5)                 # a stale now is raised to the node's newest stamp
    q.put(2, c, 7)
    assert q.peek_oldest_ms(1) == 10 and q.peek_oldest_ms(2) == 7
    assert q.pending_count() == 3 and q.pending_count(1) == 2 and len(q) == 3
    assert q.remove_expired(17, 10) == []
    assert q.remove_expired(18, 10) == [c]          # 18 - 7 > 10
    assert q.remove_expired(21, 10) == [a, b]
    assert not q.has_pending() and q.nodes() == []


def test_unsent_expiry_after_drain_uses_fresh_bound():
    q = UnsentQueue()
    q.put(1, Req(1, 1), 0)
    q.drain(1)                     # the oldest-stamp bound is now stale (0)
    late = Req(2, 2)
    q.put(2, late, 100)
    assert q.remove_expired(105, 10) == []          # scans, finds nothing, tightens the bound
    assert q.remove_expired(111, 10) == [late]


def test_unsent_drain_limits():
    q = UnsentQueue()
    reqs = [Req(1, i) for i in range(5)]
    for r in reqs:
        q.put(1, r, 0)
    assert q.drain(1, 0) == []
    assert q.drain(1, 2) == reqs[:2]
    assert q.drain(1, 100) == reqs[2:]
    assert q.drain(1) == [] and q.drain("unknown") == []
    with pytest.raises(IllegalArgumentError):
        q.drain(1, -1)
    q.put(1, reqs[0], 0)
    for bad in (1.5, 100.0, "2"):
        with pytest.raises(TypeError):
            q.drain(1, bad)
    assert q.drain(1, 10**30) == [reqs[0]]          # a huge limit means "all"


def test_unsent_remove_node_and_unknown_nodes():
    q = UnsentQueue()
    r1, r2 = Req(1, 1), Req(1, 2)
    q.put(1, r1, 0)
    q.put(1, r2, 1)
    assert q.remove_node(1) == [r1, r2]
    assert q.remove_node(1) == [] and q.remove_node(42) == []
    assert q.peek_oldest_ms(42) is None and q.pending_count(42) == 0
    assert not q.has_pending(42) and len(q) == 0


def test_unsent_extreme_times_and_timeouts():
    q = UnsentQueue()
    lo, mid, hi = Req(1, 1), Req(2, 2), Req(3, 3)
    q.put(1, lo, INT64_MIN)
    q.put(2, mid, 0)
    q.put(3, hi, INT64_MAX)
    assert q.remove_expired(INT64_MIN, 0) == []
    assert q.remove_expired(INT64_MAX, INT64_MAX) == [lo]            # MAX - s > MAX  <=> s < 0
    assert q.remove_expired(INT64_MAX, 0) == [mid]
    assert q.remove_expired(INT64_MAX, 0) == []                       # MAX - MAX = 0, not > 0
    assert q.pending_count() == 1


def test_unsent_hostile_arguments():
    q = UnsentQueue()
    q.put(1, Req(1, 1), 5)
    with pytest.raises(IllegalArgumentError):
        q.remove_expired(10, -1)
    with pytest.raises(OverflowError):
        q.put(1, Req(1, 2), 2**63)
    with pytest.raises(OverflowError):
        q.remove_expired(INT64_MIN - 1, 0)
    for bad in (1.5, None, "3"):
        with pytest.raises(TypeError):
            q.put(1, Req(1, 3), bad)
        with pytest.raises(TypeError):
            q.remove_expired(bad, 0)
        with pytest.raises(TypeError):
            q.remove_expired(0, bad)
    assert q.pending_count() == 1 and q.peek_oldest_ms(1) == 5
    with pytest.raises(TypeError):
        q.put([1], Req(1, 4), 0)          # unhashable node id
    with pytest.raises(TypeError):
        q.requests([1])
    assert len(q) == 1
    assert q.requests(12345) == [] and q.requests(None) == []


def test_requests_lists_without_removing():
    """requests() is a snapshot, oldest first: changing it changes neither queue, and the
    ring keeps its order across growth with a moved head."""
    q, f = UnsentQueue(), InFlightRequests(100)
    reqs = [Req(1, i) for i in range(40)]
    for r in reqs[:5]:
        q.put(1, r, 0)
        f.add(1, r.n, r, 0, 10)
    q.drain(1, 3)
    for r in reqs[:3]:
        f.complete_next(1, r.n)
    for r in reqs[5:]:                  # grows both rings past their head
        q.put(1, r, 0)
        f.add(1, r.n, r, 0, 10)
    for listed in (q.requests(1), f.requests(1)):
        assert listed == reqs[3:]
        listed.clear()
    assert q.requests(1) == f.requests(1) == reqs[3:]
    assert q.pending_count(1) == f.count(1) == 37
    assert q.drain(1) == reqs[3:] and q.requests(1) == []


def test_unsent_huge_counts():
    q = UnsentQueue()
    n = 200_000
    reqs = [Req(i % 3, i) for i in range(n)]
    for i, r in enumerate(reqs):
        q.put(r.node, r, i)
    assert len(q) == n
    expired = q.remove_expired(n // 2 + 10, 10)     # stamps < n/2 expire
    assert grouped_by_node(expired) == {k: [r for r in reqs[: n // 2] if r.node == k]
                                        for k in range(3)}
    assert q.drain(0) == [r for r in reqs[n // 2:] if r.node == 0]
    many = UnsentQueue()
    for node in range(10_000):
        many.put(node, Req(node, 0), node)
    assert len(many.nodes()) == 10_000
    assert len(many.remove_expired(19_999, 10_000)) == 10_000 - 1   # stamps < 9_999
    assert many.nodes() == [9_999]


def test_unsent_releases_references_and_collects_cycles():
    q = UnsentQueue()
    reqs = [Req(1, i) for i in range(20)]
    refs = [weakref.ref(r) for r in reqs]
    for r in reqs:
        q.put(r.node, r, 0)
    del r
    out = q.drain(1, 10)
    del reqs, out
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 10
    q.remove_node(1)
    gc.collect()
    assert all(ref() is None for ref in refs)
    q = UnsentQueue()
    cyc = Req(1, 0)
    cyc.payload = q                 # request -> queue -> request
    q.put(1, cyc, 0)
    ref = weakref.ref(cyc)
    del q, cyc
    gc.collect()
    assert ref() is None


# ======================================================================= in flight
class ModelInFlight:
    def __init__(self, max_per_connection):
        if (not isinstance(max_per_connection, int) or isinstance(max_per_connection, bool)
                or not 1 <= max_per_connection <= INT32_MAX):
            raise ConfigurationError("max.in.flight.requests.per.connection")
        self.max = max_per_connection
        self.q = {}              # node -> [(correlation id, request, send, timeout)], oldest first

    def add(self, node, cid, req, send, timeout):
        if not INT32_MIN <= cid <= INT32_MAX:
            raise OverflowError("correlation id")
        if timeout < 0:
            raise IllegalArgumentError("timeout")
        lst = self.q.setdefault(node, [])
        if len(lst) >= self.max:
            raise IllegalStateError("full")
        lst.append((cid, req, send, timeout))

    def complete_next(self, node, cid):
        lst = self.q.get(node)
        if not lst or lst[0][0] != cid:
            raise CorrelationIdMismatchError("mismatch")
        return lst.pop(0)[1]

    def complete_last_unanswered(self, node):
        lst = self.q.get(node)
        if not lst:
            raise IllegalStateError("empty")
        return lst.pop()[1]

    def clear_node(self, node):
        return [r for _, r, _, _ in self.q.pop(node, [])]

    def nodes_with_timed_out_requests(self, now):
        return sorted((n for n, lst in self.q.items()
                       if any(now - send > timeout for _, _, send, timeout in lst)), key=repr)

    def next_timeout_ms(self, node=None):
        lists = self.q.values() if node is None else [self.q.get(node, [])]
        deadlines = [send + timeout for lst in lists for _, _, send, timeout in lst]
        return clamp(min(deadlines) + 1) if deadlines else None

    def can_send_more(self, node):
        return len(self.q.get(node, [])) < self.max

    def count(self, node=None):
        if node is None:
            return sum(len(lst) for lst in self.q.values())
        return len(self.q.get(node, []))

    def nodes(self):
        return sorted((n for n, lst in self.q.items() if lst), key=repr)

    def deadlines(self):
        return [send + timeout for lst in self.q.values() for _, _, send, timeout in lst]


def assert_inflight_same(real, model, nodes, probes):
    assert len(real) == model.count() == real.count()
    assert sorted(real.nodes(), key=repr) == model.nodes()
    assert real.next_timeout_ms() == model.next_timeout_ms()
    for n in nodes:
        assert real.count(n) == model.count(n)
        assert real.can_send_more(n) == model.can_send_more(n)
        assert real.next_timeout_ms(n) == model.next_timeout_ms(n)
        assert real.requests(n) == [req for _, req, _, _ in model.q.get(n, ())]
    for now in probes:
        assert sorted(real.nodes_with_timed_out_requests(now), key=repr) == \
            model.nodes_with_timed_out_requests(now), now


def inflight_probes(model, now):
    points = {now, INT64_MIN, INT64_MAX}
    for d in model.deadlines():
        points.update((d - 1, d, d + 1))
    return sorted({clamp(p) for p in points})


class InFlightMachine(RuleBasedStateMachine):
    NODES = [0, 1, 2, "coordinator"]

    @initialize(max_per=st.integers(1, 5), start=st.one_of(
        st.integers(-50, 50), st.sampled_from([INT64_MIN, INT64_MAX - 100, 2**62])))
    def create(self, max_per, start):
        self.real, self.model = InFlightRequests(max_per), ModelInFlight(max_per)
        self.now = start
        self.cid = 0
        self.n = 0

    @rule(dt=st.one_of(st.integers(0, 30), st.integers(0, 2**62)))
    def advance(self, dt):
        self.now = clamp(self.now + dt)

    @rule(node=st.sampled_from(NODES), timeout=st.one_of(
        st.integers(0, 40), st.sampled_from([0, INT64_MAX, 2**62]), st.just(-1)),
        cid=st.one_of(st.none(), st.sampled_from([INT32_MIN, INT32_MAX, INT32_MAX + 1])))
    def add(self, node, timeout, cid):
        if cid is None:
            self.cid = (self.cid + 1) % (INT32_MAX + 1)
            cid = self.cid
        self.n += 1
        r = Req(node, self.n)
        assert outcome(self.real.add, node, cid, r, self.now, timeout) == \
            outcome(self.model.add, node, cid, r, self.now, timeout)

    @rule(node=st.sampled_from(NODES + [99]), right=st.booleans(),
          wrong=st.integers(INT64_MIN, INT64_MAX))
    def complete_next(self, node, right, wrong):
        lst = self.model.q.get(node)
        cid = lst[0][0] if (right and lst) else wrong
        real = outcome(self.real.complete_next, node, cid)
        assert real == outcome(self.model.complete_next, node, cid)

    @rule(node=st.sampled_from(NODES + [99]))
    def complete_last_unanswered(self, node):
        assert outcome(self.real.complete_last_unanswered, node) == \
            outcome(self.model.complete_last_unanswered, node)

    @rule(node=st.sampled_from(NODES + [99]))
    def clear_node(self, node):
        assert self.real.clear_node(node) == self.model.clear_node(node)

    @invariant()
    def same_state(self):
        if hasattr(self, "model"):
            assert_inflight_same(self.real, self.model, self.NODES + [99],
                                 inflight_probes(self.model, self.now))


TestInFlightStateful = InFlightMachine.TestCase
TestInFlightStateful.settings = settings(max_examples=150, stateful_step_count=50,
                                         deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("seed", range(3))
def test_inflight_random_sequences_match_model(seed):
    # Mixed per-request timeouts exercise the per-node minimum-deadline deque; a large cap
    # with bursts grows rings whose head has moved.
    rng = random.Random(seed)
    max_per = rng.choice([1, 3, 64])
    real, model = InFlightRequests(max_per), ModelInFlight(max_per)
    nodes, now, n, cid = list(range(4)), 0, 0, 0
    for _ in range(6000):
        op = rng.random()
        node = rng.choice(nodes)
        if op < 0.5:
            n += 1
            cid += 1
            r = Req(node, n)
            timeout = rng.choice([rng.randrange(0, 50), 30])
            assert outcome(real.add, node, cid, r, now, timeout) == \
                outcome(model.add, node, cid, r, now, timeout)
        elif op < 0.8:
            lst = model.q.get(node)
            c = lst[0][0] if lst and rng.random() < 0.9 else -7
            assert outcome(real.complete_next, node, c) == outcome(model.complete_next, node, c)
        elif op < 0.85:
            assert outcome(real.complete_last_unanswered, node) == \
                outcome(model.complete_last_unanswered, node)
        elif op < 0.88:
            assert real.clear_node(node) == model.clear_node(node)
        else:
            now += rng.randrange(0, 15)
        assert_inflight_same(real, model, nodes, (now, now + rng.randrange(0, 60)))


def test_inflight_capacity_exactly_at_max():
    f = InFlightRequests(3)
    reqs = [Req(1, i) for i in range(4)]
    for i in range(3):
        assert f.can_send_more(1)
        f.add(1, i, reqs[i], 0, 100)
    assert not f.can_send_more(1) and f.count(1) == 3
    assert f.can_send_more(2)                       # other connections are independent
    with pytest.raises(IllegalStateError, match="max.in.flight.requests.per.connection"):
        f.add(1, 3, reqs[3], 0, 100)
    assert f.count(1) == 3 and len(f) == 3
    assert f.complete_next(1, 0) is reqs[0]
    assert f.can_send_more(1)
    f.add(1, 3, reqs[3], 0, 100)
    assert f.clear_node(1) == reqs[1:]


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.5, "5", None, 2**31])
def test_inflight_invalid_max(bad):
    with pytest.raises(ConfigurationError, match=r"max\.in\.flight\.requests\.per\.connection"):
        InFlightRequests(bad)


def test_inflight_max_one_and_max_int32():
    f = InFlightRequests(1)
    f.add(0, 1, "a", 0, 10)
    assert not f.can_send_more(0)
    assert InFlightRequests(INT32_MAX).max_per_connection == INT32_MAX


def test_complete_next_on_empty_or_unknown_node():
    f = InFlightRequests(5)
    with pytest.raises(CorrelationIdMismatchError) as info:
        f.complete_next(7, 1)
    assert info.value.expected is None and info.value.received == 1 and info.value.node_id == 7
    assert isinstance(info.value, ProtocolError)
    f.add(7, 1, "a", 0, 10)
    assert f.complete_next(7, 1) == "a"
    with pytest.raises(CorrelationIdMismatchError):
        f.complete_next(7, 1)                       # node known but empty
    with pytest.raises(IllegalStateError):
        f.complete_last_unanswered(7)
    with pytest.raises(IllegalStateError):
        f.complete_last_unanswered(8)


def test_mismatch_leaves_queue_unchanged():
    f = InFlightRequests(5)
    f.add(1, 10, "a", 0, 100)
    f.add(1, 11, "b", 1, 100)
    with pytest.raises(CorrelationIdMismatchError) as info:
        f.complete_next(1, 11)                      # responses arrive in order: 11 is wrong
    assert (info.value.expected, info.value.received) == (10, 11)
    assert "10" in str(info.value) and "11" in str(info.value)
    assert f.count(1) == 2 and f.next_timeout_ms(1) == 101
    assert f.clear_node(1) == ["a", "b"]            # the caller fails all, mismatched included


def test_correlation_id_range():
    f = InFlightRequests(5)
    f.add(1, INT32_MIN, "lo", 0, 1)
    f.add(1, INT32_MAX, "hi", 0, 1)
    for bad in (INT32_MAX + 1, INT32_MIN - 1):
        with pytest.raises(OverflowError):
            f.add(1, bad, "x", 0, 1)
    with pytest.raises(CorrelationIdMismatchError):
        f.complete_next(1, INT32_MIN + 2**32)       # same low 32 bits must not match
    with pytest.raises(OverflowError):
        f.complete_next(1, 2**64)
    with pytest.raises(TypeError):
        f.complete_next(1, float(INT32_MIN))
    assert f.complete_next(1, INT32_MIN) == "lo"
    assert f.complete_next(1, INT32_MAX) == "hi"


def test_per_request_timeouts_use_minimum_deadline():
    f = InFlightRequests(10)
    f.add(1, 1, "slow", 0, 100)       # deadline 100
    f.add(1, 2, "fast", 10, 5)        # deadline 15: younger but times out first
    assert f.next_timeout_ms(1) == 16 and f.next_timeout_ms() == 16
    assert f.nodes_with_timed_out_requests(15) == []
    assert f.nodes_with_timed_out_requests(16) == [1]
    f.complete_next(1, 1)
    assert f.next_timeout_ms(1) == 16
    f.complete_next(1, 2)
    assert f.next_timeout_ms(1) is None and f.nodes_with_timed_out_requests(10**9) == []


def test_complete_last_unanswered_restores_evicted_candidates():
    f = InFlightRequests(10)
    f.add(1, 1, "a", 0, 50)           # deadline 50
    f.add(1, 2, "b", 0, 100)          # deadline 100
    f.add(1, 3, "c", 0, 1)            # deadline 1: the minimum, evicts a and b as candidates
    assert f.next_timeout_ms(1) == 2
    assert f.complete_last_unanswered(1) == "c"
    assert f.next_timeout_ms(1) == 51                # a is the minimum again
    assert f.complete_next(1, 1) == "a"
    assert f.next_timeout_ms(1) == 101


def test_inflight_extreme_times():
    f = InFlightRequests(5)
    f.add(1, 1, "never", INT64_MAX - 5, INT64_MAX)      # deadline saturates
    assert f.next_timeout_ms(1) == INT64_MAX
    assert f.nodes_with_timed_out_requests(INT64_MAX) == []
    f.add(2, 1, "ancient", INT64_MIN, 0)
    assert f.next_timeout_ms(2) == INT64_MIN + 1
    assert f.nodes_with_timed_out_requests(INT64_MIN) == []
    assert f.nodes_with_timed_out_requests(INT64_MIN + 1) == [2]
    assert f.next_timeout_ms() == INT64_MIN + 1
    f.add(3, 1, "now", 2**62, 0)
    assert f.nodes_with_timed_out_requests(2**62) == [2]
    assert sorted(f.nodes_with_timed_out_requests(2**62 + 1)) == [2, 3]


def test_inflight_hostile_arguments():
    f = InFlightRequests(5)
    with pytest.raises(IllegalArgumentError):
        f.add(1, 1, "x", 0, -1)
    for bad in (1.5, None, "1"):
        with pytest.raises(TypeError):
            f.add(1, 1, "x", bad, 10)
        with pytest.raises(TypeError):
            f.add(1, 1, "x", 0, bad)
        with pytest.raises(TypeError):
            f.add(1, bad, "x", 0, 10)
        with pytest.raises(TypeError):
            f.nodes_with_timed_out_requests(bad)
    with pytest.raises(OverflowError):
        f.add(1, 1, "x", 2**63, 10)
    assert len(f) == 0 and f.nodes() == []
    assert f.clear_node(1) == [] and f.clear_node("nope") == []
    assert f.next_timeout_ms() is None and f.next_timeout_ms(1) is None
    assert f.can_send_more(12345) and f.count(12345) == 0
    assert f.requests(12345) == [] and f.requests(None) == []
    with pytest.raises(TypeError):
        f.requests([1])                   # unhashable node id


def test_inflight_huge_counts_and_wraparound():
    f = InFlightRequests(1_000_000)
    n = 100_000
    for i in range(n):
        f.add(1, i, i, i, 1_000)
    assert f.count(1) == n and not f.nodes_with_timed_out_requests(1_000)
    assert f.nodes_with_timed_out_requests(1_001) == [1]
    for i in range(n // 2):
        assert f.complete_next(1, i) == i
    for i in range(n, n + n // 2 + 7):             # grows while the head is mid-ring
        f.add(1, i, i, i, 1_000)
    assert f.next_timeout_ms(1) == n // 2 + 1_001
    assert f.clear_node(1) == list(range(n // 2, n + n // 2 + 7))
    assert len(f) == 0


def test_inflight_releases_references_and_collects_cycles():
    f = InFlightRequests(100)
    reqs = [Req(1, i) for i in range(20)]
    refs = [weakref.ref(r) for r in reqs]
    for i, r in enumerate(reqs):
        f.add(1, i, r, 0, 10)
    del r
    for i in range(5):
        f.complete_next(1, i)
    f.complete_last_unanswered(1)
    del reqs
    gc.collect()
    assert sum(ref() is not None for ref in refs) == 14
    f.clear_node(1)
    gc.collect()
    assert all(ref() is None for ref in refs)
    f = InFlightRequests(2)
    cyc = Req(1, 0)
    cyc.payload = f
    f.add(1, 0, cyc, 0, 10)
    ref = weakref.ref(cyc)
    del f, cyc
    gc.collect()
    assert ref() is None


def test_constructor_keyword_matches_contract():
    assert InFlightRequests(max_per_connection=5).max_per_connection == 5

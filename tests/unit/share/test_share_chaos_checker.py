"""The share chaos checker's rule for acknowledgements of unknown outcome (kclient.testing.
share_chaos), on scripted member events: such a record is final only when the broker's start
offset is past it."""
from __future__ import annotations

from types import SimpleNamespace

from kclient.testing.share_chaos import ShareChaos, _ShareHistory
from kclient.testing.share_chaos_member import ACCEPT, RELEASE


def checker(killed=(), start_offsets=None) -> ShareChaos:
    chaos = ShareChaos.__new__(ShareChaos)       # the rule only: no cluster, no processes
    chaos.history = _ShareHistory()
    chaos.all_members = [SimpleNamespace(name=name, killed=True) for name in killed]
    chaos._start_offsets = start_offsets
    return chaos


def deliver(chaos, member, p, offset, t=1.0):
    chaos.history.add(member, {"e": "poll", "t": t, "r": [[p, [[offset, offset, 1]]]]})


def test_an_answered_accept_is_final_and_a_refused_one_is_not():
    chaos = checker(start_offsets={0: 100})
    deliver(chaos, "m0.0", 0, 5)
    deliver(chaos, "m0.0", 0, 6)
    chaos.history.add("m0.0", {"e": "acking", "t": 2.0, "r": [[0, 5, ACCEPT], [0, 6, ACCEPT]]})
    chaos.history.add("m0.0", {"e": "ack", "t": 2.1, "r": [[0, 5, ACCEPT]], "ok": [0], "failed": []})
    assert chaos._handled((0, 5), set())
    chaos.history.add("m0.0", {"e": "ack", "t": 2.2, "r": [[0, 6, ACCEPT]], "ok": [], "failed": [0]})
    assert not chaos._handled((0, 6), set())      # refused: it must come back, start offset or not


def test_an_unanswered_accept_counts_only_below_the_brokers_start_offset():
    chaos = checker()
    deliver(chaos, "m0.0", 0, 5)
    chaos.history.add("m0.0", {"e": "acking", "t": 2.0, "r": [[0, 5, ACCEPT]]})
    chaos.history.add("m0.0", {"e": "ack", "t": 2.1, "r": [[0, 5, ACCEPT]], "ok": [], "failed": []})
    assert chaos._maybe_taken((0, 5), set())
    assert not chaos._handled((0, 5), set())       # not read from the broker yet
    chaos._start_offsets = {0: 5}
    assert not chaos._handled((0, 5), set())       # the broker has it before its start offset: not final
    chaos._start_offsets = {0: 6}
    assert chaos._handled((0, 5), set())
    assert not chaos._handled((1, 5), set())       # another partition: no acknowledgement at all


def test_a_killed_members_announced_acknowledgement_may_have_been_taken():
    chaos = checker(killed=["m1.0"], start_offsets={0: 10})
    deliver(chaos, "m1.0", 0, 7)
    chaos.history.add("m1.0", {"e": "acking", "t": 2.0, "r": [[0, 7, ACCEPT]]})
    assert chaos._handled((0, 7), {"m1.0"})
    assert not chaos._handled((0, 7), set())       # a member not killed reports its outcome
    # its outcome arrived before the kill (refused): nothing unknown about it
    chaos.history.add("m1.0", {"e": "ack", "t": 2.1, "r": [[0, 7, ACCEPT]], "ok": [], "failed": [0]})
    assert not chaos._handled((0, 7), {"m1.0"})


def test_a_release_of_unknown_outcome_is_no_final_state():
    chaos = checker(start_offsets={0: 10})
    deliver(chaos, "m0.0", 0, 3)
    chaos.history.add("m0.0", {"e": "ack", "t": 2.1, "r": [[0, 3, RELEASE]], "ok": [], "failed": []})
    assert not chaos._maybe_taken((0, 3), set()) and not chaos._handled((0, 3), set())


def test_the_quiet_period_asks_the_broker_only_for_records_of_unknown_outcome():
    chaos = checker()
    reads = []

    def read():
        reads.append(1)
        chaos._start_offsets = {0: 6}

    chaos._read_start_offsets = read
    producer = SimpleNamespace(acked={(0, 4): 4, (0, 5): 5})
    deliver(chaos, "m0.0", 0, 4)
    deliver(chaos, "m0.0", 0, 5)
    chaos.history.add("m0.0", {"e": "ack", "t": 2.1, "r": [[0, 5, ACCEPT]], "ok": [], "failed": []})
    assert not chaos._caught_up(producer) and reads == []     # offset 4 has no acknowledgement yet
    chaos.history.add("m0.0", {"e": "ack", "t": 2.2, "r": [[0, 4, ACCEPT]], "ok": [0], "failed": []})
    assert chaos._caught_up(producer) and reads == [1]


def test_records_the_broker_holds_are_those_of_unknown_outcome_at_or_past_its_start_offset():
    chaos = checker()
    chaos._read_start_offsets = lambda: None
    producer = SimpleNamespace(acked={(0, 4): 4, (0, 5): 5, (1, 9): 9})
    for p, o in producer.acked:
        deliver(chaos, "m0.0", p, o)
    chaos.history.add("m0.0", {"e": "ack", "t": 2.1, "r": [[0, 4, ACCEPT], [0, 5, ACCEPT], [1, 9, ACCEPT]],
                               "ok": [], "failed": []})
    chaos._start_offsets = {0: 5, 1: 9}
    assert chaos._held_by_broker(producer) == {0: [5], 1: [9]}    # offset 4: confirmed
    chaos.history.add("m0.0", {"e": "ack", "t": 2.2, "r": [[1, 9, ACCEPT]], "ok": [1], "failed": []})
    assert chaos._held_by_broker(producer) == {0: [5]}


def test_no_leader_is_moved_while_a_record_is_pending_for_another_reason():
    chaos = checker(start_offsets={0: 0})
    chaos._read_start_offsets = lambda: None
    producer = SimpleNamespace(acked={(0, 4): 4, (0, 5): 5})
    deliver(chaos, "m0.0", 0, 4)
    chaos.history.add("m0.0", {"e": "ack", "t": 2.1, "r": [[0, 4, ACCEPT]], "ok": [], "failed": []})
    assert chaos._held_by_broker(producer) == {}      # offset 5 was never delivered: a loss to report
    chaos.history.add("m0.0", {"e": "ack", "t": 2.2, "r": [[0, 5, ACCEPT]], "ok": [0], "failed": []})
    assert chaos._held_by_broker(producer) == {0: [4]}

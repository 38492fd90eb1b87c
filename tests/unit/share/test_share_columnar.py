"""Columnar share records and acknowledgement by ranges: ShareFetcher.columnar_of, PendingAcks,
OffsetRanges and RangeSet, with a scripted client (no broker)."""
from __future__ import annotations

import pytest

from kclient.share.acknowledgements import GAP, AcknowledgeType, OffsetRanges, PendingAcks
from kclient.share.columnar import ShareColumnarRecords
from kclient.share.held import RangeSet

from test_share_fetcher import TP0, env, fetch_answer, part, records_bytes  # noqa: F401  (env: fixture)


def test_columnar_rows_are_the_acquired_ones_with_their_delivery_counts(env):  # noqa: F811
    client, fetcher = env
    fetcher.send_fetches({TP0})
    # offsets 10..14 in the batch; 10-11 second delivery, 12 not acquired, 13-15 first (15: no record)
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(10, 5), [(10, 11, 2), (13, 15, 1)])]))
    [acquired] = fetcher.take_acquired()
    batch = fetcher.columnar_of(acquired)
    assert isinstance(batch, ShareColumnarRecords) and batch.topic_partition == TP0 and len(batch) == 4
    assert list(batch.offsets) == [10, 11, 13, 14]
    assert list(batch.delivery_counts) == [2, 2, 1, 1]
    assert batch.values() == [b"v10", b"v11", b"v13", b"v14"]
    assert batch.offset_ranges == [(10, 11), (13, 14)]
    assert fetcher.pending_acknowledgements() == 1                   # offset 15: a gap
    # the slow path gives the records poll() gives, delivery counts included
    assert [(r.offset, r.value, r.delivery_count) for r in batch] == [
        (10, b"v10", 2), (11, b"v11", 2), (13, b"v13", 1), (14, b"v14", 1)]
    picked = batch.select(11, 13)
    assert picked is not None and list(picked.offsets) == [11, 13] and list(picked.delivery_counts) == [2, 1]
    assert batch.select(20, 30) is None


def test_a_range_acknowledgement_is_one_batch_and_reports_its_offsets_as_a_set(env):  # noqa: F811
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 1000), [(0, 999, 1)])]))
    [acquired] = fetcher.take_acquired()
    batch = fetcher.columnar_of(acquired)
    assert batch is not None and batch.offset_ranges == [(0, 999)]
    fetcher.acknowledge_range(TP0, 0, 499, AcknowledgeType.ACCEPT)
    fetcher.acknowledge_range(TP0, 500, 999, AcknowledgeType.RELEASE)
    fetcher.acknowledge(TP0, 700, AcknowledgeType.REJECT)           # a later acknowledgement replaces
    assert fetcher.pending_acknowledgements() == 1000
    fetcher.send_fetches({TP0})
    assert client.sent[-1][2]["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
        {"first_offset": 0, "last_offset": 499, "acknowledge_types": [1]},
        {"first_offset": 500, "last_offset": 699, "acknowledge_types": [2]},
        {"first_offset": 700, "last_offset": 700, "acknowledge_types": [3]},
        {"first_offset": 701, "last_offset": 999, "acknowledge_types": [2]}]
    client.sent[-1][3].complete(fetch_answer([part(0, None, [], ack_error=0)]))
    [result] = fetcher.take_results()
    assert result.error is None and len(result.offsets) == 1000 and result.offsets == set(range(1000))
    assert 999 in result.offsets and 1000 not in result.offsets


def test_pending_acks_split_by_type_and_leave_gaps_out_of_the_offsets():
    acks = PendingAcks()
    acks.put(0, 9, AcknowledgeType.ACCEPT)
    acks.put(10, 10, GAP)
    acks.put(11, 20, AcknowledgeType.RENEW)
    acks.put(15, 15, AcknowledgeType.ACCEPT)
    renew, rest = acks.split(lambda t: t == AcknowledgeType.RENEW)
    assert renew.batches() == [{"first_offset": 11, "last_offset": 14, "acknowledge_types": [4]},
                               {"first_offset": 16, "last_offset": 20, "acknowledge_types": [4]}]
    assert rest.batches() == [{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]},
                              {"first_offset": 10, "last_offset": 10, "acknowledge_types": [0]},
                              {"first_offset": 15, "last_offset": 15, "acknowledge_types": [1]}]
    assert rest.offsets() == {*range(10), 15} and len(acks) == 21
    assert OffsetRanges([(5, 7), (1, 2), (3, 4)]).ranges == [(1, 7)]
    assert repr(OffsetRanges([(1, 2), (9, 9)])) == "OffsetRanges(1..2, 9..9)"


def test_range_set_covers_touches_and_removes():
    rs = RangeSet()
    rs.add(10, 19)
    rs.add(30, 39)
    rs.add(20, 20)                         # adjacent: merged
    assert list(rs) == [(10, 20), (30, 39)] and len(rs) == 21
    assert rs.covers(10, 20) and rs.covers(31, 31) and not rs.covers(19, 30) and not rs.covers(0, 5)
    assert rs.touches(0, 10) and rs.touches(20, 30) and not rs.touches(21, 29) and not rs.touches(40, 50)
    rs.remove(15, 32)
    assert list(rs) == [(10, 14), (33, 39)]
    rs.remove(0, 100)
    assert not rs and len(rs) == 0


def test_counts_must_match_the_rows(env):  # noqa: F811
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 1)])]))
    batch = fetcher.columnar_of(fetcher.take_acquired()[0])
    assert batch is not None
    with pytest.raises(ValueError, match="delivery counts"):
        ShareColumnarRecords(TP0, batch._pieces, batch._counts[:1])

"""The history checker (kclient.testing.checker) catches each of Jepsen's Kafka criteria and
passes a clean history, including a crash with legitimate redelivery."""
from __future__ import annotations

from kclient.testing.checker import Commit, Delivery, check

T = "t"


def acked(n: int, partition: int = 0):
    return [(T, partition, o) for o in range(n)]


def reads(member: str, gen: int, offsets, partition: int = 0):
    return [Delivery(member, gen, T, partition, o) for o in offsets]


def test_a_clean_history_with_a_crash_and_redelivery_passes():
    # m1 reads 0-5, commits 4 (next offset), crashes; m2 re-reads 4-5 then goes on to 9.
    deliveries = reads("m1", 1, range(6)) + reads("m2", 2, range(4, 10))
    commits = [Commit("m1", 1, T, 0, 4), Commit("m2", 2, T, 0, 10)]
    report = check(acked(10), deliveries, commits, crashed=["m1"])
    assert report.ok, report.summary()
    assert report.summary() == {"acknowledged": 10, "delivered": 12, "lost": 0, "duplicated": 0,
                                "nonmonotonic": 0, "skipped": 0, "split_brain": 0}


def test_lost_records_are_found():
    report = check(acked(5), reads("m1", 1, [0, 1, 2]))
    assert report.lost == [(T, 0, 3), (T, 0, 4)] and not report.ok


def test_redelivery_below_the_crashed_members_commit_is_a_duplicate():
    deliveries = reads("m1", 1, range(6)) + reads("m2", 2, range(2, 6))
    report = check(acked(6), deliveries, [Commit("m1", 1, T, 0, 4)], crashed=["m1"])
    assert report.duplicated == [(T, 0, 2), (T, 0, 3)]


def test_redelivery_after_a_clean_leave_is_a_duplicate():
    deliveries = reads("m1", 1, range(6)) + reads("m2", 2, range(4, 6))
    report = check(acked(6), deliveries, [Commit("m1", 1, T, 0, 4)])
    assert report.duplicated == [(T, 0, 4), (T, 0, 5)]


def test_one_member_reading_a_record_twice_in_a_generation_is_a_duplicate_and_nonmonotonic():
    report = check(acked(4), reads("m1", 1, [0, 1, 2, 1, 2, 3]))
    assert report.duplicated == [(T, 0, 1), (T, 0, 2)]
    assert report.nonmonotonic == [("m1", 1, T, 0, 2, 1)]


def test_skipped_offsets_are_found_only_where_the_log_has_records():
    report = check(acked(6), reads("m1", 1, [0, 1, 4, 5]))
    assert report.skipped == [("m1", 1, T, 0, 1, 4)] and report.lost == [(T, 0, 2), (T, 0, 3)]
    # A gap the log has (transaction markers, compaction) is not a skip.
    report = check([(T, 0, o) for o in (0, 1, 4, 5)], reads("m1", 1, [0, 1, 4, 5]))
    assert report.ok


def test_two_members_of_one_generation_reading_a_record_is_split_brain():
    deliveries = reads("m1", 3, [0, 1]) + reads("m2", 3, [1])
    report = check(acked(2), deliveries, crashed=["m1"])
    assert report.split_brain == [(T, 0, 1, 3)]


def test_only_commits_made_before_the_second_delivery_cover_a_record():
    # m1 reads 0-5 at t=1 and is fenced (its commit of 6 fails); it rejoins, reads 4-5 again
    # at t=2 from its last successful commit (4), then commits 6 at t=3: allowed.
    deliveries = [Delivery("m1", 1, T, 0, o, 1.0) for o in range(6)] + \
                 [Delivery("m1", 2, T, 0, o, 2.0) for o in (4, 5)]
    commits = [Commit("m1", 1, T, 0, 4, 0.5), Commit("m1", 2, T, 0, 6, 3.0)]
    assert check(acked(6), deliveries, commits, crashed=["m1"]).ok
    # Had the commit of 6 come before the second reading, that reading would be a duplicate.
    commits = [Commit("m1", 1, T, 0, 4, 0.5), Commit("m1", 1, T, 0, 6, 1.5)]
    assert check(acked(6), deliveries, commits, crashed=["m1"]).duplicated == [(T, 0, 4), (T, 0, 5)]

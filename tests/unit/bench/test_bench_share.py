"""``python -m bench share``: its arguments and what it skips, without a broker."""
from __future__ import annotations

import pytest

from bench import share
from bench.share_members import _bad
from bench.drivers._common import SEQ
from kclient.share.consumer import KafkaShareConsumer


@pytest.mark.parametrize("argv", [["--drivers", "nope"], ["--records", "0"], ["--members", "x"],
                                  ["--members", "0"]])
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        share.main(argv)
    assert exc.value.code == 2


def test_the_columnar_driver_runs_only_where_the_share_consumer_has_poll_columnar():
    why = share.unavailable("kclient-columnar")
    assert (why is None) == hasattr(KafkaShareConsumer, "poll_columnar")


def test_members_spot_check_the_sequence_number():
    assert _bad(3, 5, SEQ.pack(5 * 8 + 3) + b"x", 8) is None
    assert "expected 43" in _bad(3, 5, SEQ.pack(1) + b"x", 8)
    assert "no sequence number" in _bad(3, 5, None, 8)


def test_request_counts_of_a_member_and_their_summary(tmp_path, monkeypatch):
    from bench import share_members
    monkeypatch.setattr(share_members, "STATS", dict.fromkeys(share_members.STATS, 0))
    share_members._count_ack_batches({"topics": [{"partitions": [
        {"acknowledgement_batches": [{"first_offset": 0, "last_offset": 9}, {"first_offset": 12, "last_offset": 20}]},
        {"acknowledgement_batches": []}]}]})
    share_members._count_answer({"responses": [{"partitions": [
        {"acquired_records": [{"first_offset": 0, "last_offset": 99}]}, {"acquired_records": []}]}]}, ahead=True)
    share_members._count_answer({"responses": []})
    s = share_members.STATS
    assert (s["ack_partitions"], s["ack_batches"]) == (1, 2)
    assert (s["fetch_answers"], s["fetch_answers_empty"], s["acquired_records"], s["acquired_ranges"]) == (2, 1, 100, 1)
    assert (s["ahead_answers_empty"], s["ahead_records"]) == (0, 100)
    monkeypatch.setenv(share_members.STATS_DIR_ENV, str(tmp_path))
    share_members._write_stats("kclient-records")
    counts = share._member_stats(str(tmp_path), "kclient-records")
    assert counts["acquired_records"] == 100 and not list(tmp_path.iterdir())
    line = share._describe_requests({"requests": dict(counts, share_fetch=2, share_fetch_ahead=1), "wall_s": 2.0,
                                     "records": 1000, "steady": {"records": 500, "cpu_s": 0.001,
                                                                 "broker_cpu_s": 0.0005}})
    assert "ShareFetch 1/s, ShareAcknowledge 0/s (2.000 and 0.000 per 1,000 records)" in line
    assert "1 of 2 fetches sent ahead (0 empty, 100 records per answer)" in line
    assert "50 records per fetch answer (1 of 2 empty" in line
    assert "once every member had records (500 records): CPU µs/record client 2.00, broker 1.00" in line


def test_confluent_members_count_their_share_requests_from_librdkafka_statistics(tmp_path, monkeypatch):
    import json

    from bench import share_members
    monkeypatch.setattr(share_members, "STATS", dict.fromkeys(share_members.STATS, 0))

    class Polled:
        def __init__(self, seen):
            self.seen = seen

        def poll(self, timeout):
            self.seen.append(json.dumps({"brokers": {
                "a:1/1": {"req": {"ShareFetch": 7, "ShareAcknowledge": 1, "Metadata": 3}},
                "GroupCoordinator": {"req": {"ShareGroupHeartbeat": 4}}}}))

    seen: list[str] = []
    share_members._confluent_requests(Polled(seen), seen)
    monkeypatch.setenv(share_members.STATS_DIR_ENV, str(tmp_path))
    share_members._write_stats("confluent")
    counts = share._member_stats(str(tmp_path), "confluent")
    assert (counts["share_fetch"], counts["share_acknowledge"]) == (7, 1)
    line = share._describe_requests({"requests": counts, "wall_s": 1.0, "records": 7000})
    assert line == "ShareFetch 7/s, ShareAcknowledge 1/s (1.000 and 0.143 per 1,000 records)"


def test_an_existing_topic_needs_an_existing_cluster():
    with pytest.raises(SystemExit) as exc:
        share.main(["--topic", "t"])
    assert exc.value.code == 2


def _run(driver, members, round_no, rate):
    # 1,000 records after the first batch, over 1000 / rate seconds
    return {"driver": driver, "members": members, "round": round_no, "records": 1100, "first_batch": 100,
            "steady_s": 1000 / rate}


def test_rounds_give_median_rates_and_the_targets_ratios_round_by_round():
    results = [_run("kclient-records", 4, 1, 3000.0), _run("confluent", 4, 1, 1000.0),
               _run("kclient-records", 4, 2, 2000.0), _run("confluent", 4, 2, 1000.0),
               _run("kclient-records", 4, 3, 3300.0), _run("confluent", 4, 3, 1100.0),
               {"driver": "java", "members": 4, "round": 1, "error": "boom"}]
    lines = share.summarise(results)
    assert any(line.startswith("kclient per record") and line.split()[-1] == "3,000" for line in lines)
    target = [line for line in lines if "confluent" in line and ">= 3x" in line]
    assert target == ["4 member(s): kclient per record >= 3x confluent-kafka ShareConsumer: 3.00x "
                      "(rounds: 2.00, 3.00, 3.00) - met"]
    assert not any(">= 2x" in line for line in lines)      # Java failed: no ratio claimed
    assert share.summarise([_run("kclient-records", 1, 1, 2000.0), _run("confluent", 1, 1, 1000.0)])[-1].endswith(
        "2.00x (rounds: 2.00) - NOT met")


def test_repeat_below_one_exits_2():
    with pytest.raises(SystemExit) as exc:
        share.main(["--repeat", "0"])
    assert exc.value.code == 2


def test_batch_records_below_one_exits_2():
    with pytest.raises(SystemExit) as exc:
        share.main(["--batch-records", "0"])
    assert exc.value.code == 2


def test_the_topic_is_written_in_batches_of_a_fixed_number_of_records(monkeypatch):
    import confluent_kafka

    made: list = []

    class Producer:
        def __init__(self, config):
            self.config = config
            self.sent: list = []
            made.append(self)

        def produce(self, topic, value, partition):
            self.sent.append((topic, partition, value))

        def poll(self, timeout):
            return 0

        def flush(self, timeout):
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", Producer)
    share.produce_fixed_batches("b:1", "t", 20, batch_records=3)
    (p,) = made
    # a batch leaves once it holds batch.num.messages records; the linger outlasts the write
    assert p.config["batch.num.messages"] == 3 and p.config["linger.ms"] >= 60_000
    assert p.config["batch.size"] >= 3 * (share.RECORD_SIZE + 64)
    assert [part for _, part, _ in p.sent] == [i % share.PARTITIONS for i in range(20)]
    assert all(len(v) == share.RECORD_SIZE and SEQ.unpack_from(v)[0] == i for i, (_, _, v) in enumerate(p.sent))

"""The drain's pass over small answers handed out whole (FetchCollector._drain_whole) gives the
records, positions and buffer accounting of the general loop, answer by answer, whatever the
mix: answers larger than what a poll takes, paused partitions, empty answers, deserializers.

No broker: answers are put into the consumer's FetchBuffer as a Fetch would."""
from __future__ import annotations

import random

import pytest

from kcore import records as R

from kclient.consumer.fetch_buffer import CompletedFetch
from kclient.consumer.fetch_collector import FetchCollector
from offline_consumer import fetch_buffer_of, offline_consumer

TOPIC = "t"
PARTITIONS = 4


def _general_loop_only(self, remaining, drained, ends, sets, kd, vd, views, leader_epoch):
    return remaining, 0, 0


def _run(seed: int, whole: bool, monkeypatch, **configs) -> list:
    """Polls of random sizes over random answers, with pauses and resumes between them: what
    each poll returned, and the positions and buffer state after it."""
    if not whole:
        monkeypatch.setattr(FetchCollector, "_drain_whole", _general_loop_only)
    rng = random.Random(seed)
    consumer, tps = offline_consumer(TOPIC, PARTITIONS, **configs)
    buffer = fetch_buffer_of(consumer)
    subs = consumer.subscription_state
    ends = {tp: 0 for tp in tps}
    seen = []
    try:
        for _ in range(60):
            for _ in range(rng.randrange(0, 6)):
                tp = rng.choice(tps)
                n = rng.choice((0, 1, 1, 2, 3, 7))
                off = ends[tp]
                if n:
                    rows = [(None, 1_700_000_000_000, b"k", b"%d-%d" % (tp.partition, off + i), [])
                            for i in range(n)]
                    raw = R.encode_batch(rows, base_offset=off)
                else:
                    raw = b""
                pipe = buffer.pipe(tp)
                if pipe.buffered >= 3:
                    continue
                buffer.add(CompletedFetch(tp, off, pipe.epoch, subs.assignment_id, memoryview(raw), None,
                                          buffer.new_frame(len(raw) + 10)), pipe)
                ends[tp] = off + n
            if rng.random() < 0.15:
                tp = rng.choice(tps)
                if tp in consumer.paused():
                    consumer.resume(tp)
                else:
                    consumer.pause(tp)
            try:
                got = consumer.poll(0, max_records=rng.randrange(1, 12))
            except ValueError as exc:      # a deserializer's: the next polls go on
                seen.append(str(exc))
                continue
            seen.append(({tp: [(r.offset, r.key, r.value) for r in recs] for tp, recs in got.items()},
                         [consumer.position(tp) for tp in tps], buffer.buffered_bytes,
                         [buffer.pipe(tp).buffered for tp in tps]))
        seen.append(consumer.metrics()["consumer-fetch-manager-metrics"]["records-consumed-total"])
    finally:
        consumer.close(autocommit=False)
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_whole_answers_drain_as_the_general_loop_does(seed, monkeypatch):
    assert _run(seed, True, monkeypatch) == _run(seed, False, monkeypatch)


def test_with_deserializers_too(monkeypatch):
    configs = {"key_deserializer": lambda b: b.decode(), "value_deserializer": lambda b: b.upper()}
    assert _run(7, True, monkeypatch, **configs) == _run(7, False, monkeypatch, **configs)


def test_a_deserializer_error_leaves_the_answer_as_the_general_loop_does(monkeypatch):
    def fails_on_1_2(b: bytes) -> bytes:
        if b == b"1-2":
            raise ValueError("undecodable")
        return b

    seen = _run(3, True, monkeypatch, value_deserializer=fails_on_1_2)
    assert "undecodable" in seen
    assert seen == _run(3, False, monkeypatch, value_deserializer=fails_on_1_2)

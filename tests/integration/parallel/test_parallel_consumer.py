"""ParallelConsumer against real brokers (Apache Kafka and Tansu; each test runs on both).

Every wait is on a condition with a deadline (handlers report through ``Seen``, whose
condition is notified on every record); handlers that must stay busy block on events the
test releases, so no test depends on timing. Committed offsets are read back from the broker.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kclient import KafkaConsumer, KafkaProducer, TopicPartition
from kclient.parallel import HandlerError, ParallelConsumer

DEADLINE = 90.0           # generous: a loaded 2-core machine
GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}   # Tansu joins in ~session/2


@pytest.fixture(params=["kafka", "tansu"])
def cluster(request):
    """Each broker in turn (named ``cluster`` so conftest marks the tests kafka / tansu)."""
    return request.getfixturevalue(request.param)


def produce(cluster, topic: str, n: int, partitions: int, keys: int | None = None) -> None:
    """Record i: value b"i", partition i % partitions, key b"k<i % keys>" (or none)."""
    with KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5) as producer:
        futures = [producer.send(topic, value=b"%d" % i, key=(b"k%d" % (i % keys)) if keys else None,
                                 partition=i % partitions) for i in range(n)]
        producer.flush(60)
        for f in futures:
            f.get(60)


def new_consumer(cluster, group: str, *topics, **cfg) -> KafkaConsumer:
    settings = dict(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
                    auto_offset_reset="earliest", **GROUP)
    settings.update(cfg)
    return KafkaConsumer(*topics, **settings)


def assigned_consumer(cluster, group: str, topic: str, partitions: int) -> KafkaConsumer:
    """Manual assignment: no join to wait for (commits still go to ``group``)."""
    consumer = new_consumer(cluster, group)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    return consumer


class Seen:
    """Records handled, reported by worker threads; waits on a condition with a deadline."""

    def __init__(self):
        self.cond = threading.Condition()
        self.handled: list[tuple[int, int, bytes | None, str]] = []   # (partition, offset, key, who)

    def add(self, record, who: str = "") -> None:
        with self.cond:
            self.handled.append((record.partition, record.offset, record.key, who))
            self.cond.notify_all()

    def wait(self, pred, what: str, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
                self.cond.wait(min(left, 0.1))   # re-check state changed outside the condition

    def pairs(self) -> list[tuple[int, int]]:
        with self.cond:
            return [(p, o) for p, o, _, _ in self.handled]


class Runner:
    """``pc.run(handler)`` on a thread, so the test thread can watch and stop it."""

    live: list[Runner] = []

    def __init__(self, pc: ParallelConsumer, handler):
        Runner.live.append(self)
        self.pc = pc
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(handler,), daemon=True)
        self.thread.start()

    def _run(self, handler) -> None:
        try:
            self.pc.run(handler, stop=self.stop)
        except BaseException as exc:  # the test inspects it
            self.error = exc

    def finish(self, timeout: float = DEADLINE) -> None:
        self.stop.set()
        self.join(timeout)

    def join(self, timeout: float = DEADLINE) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "run() did not return"


def shutdown(*consumers: KafkaConsumer) -> None:
    """After a failed assertion too: stop every run (they own the consumers) before closing."""
    try:
        while Runner.live:
            runner = Runner.live.pop()
            runner.stop.set()
            runner.thread.join(DEADLINE)
    finally:
        for c in consumers:
            c.close()


def all_pairs(n: int, partitions: int) -> set[tuple[int, int]]:
    return {(i % partitions, i // partitions) for i in range(n)}


def committed(consumer: KafkaConsumer, topic: str, partitions: int) -> dict[int, int | None]:
    return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}


def wait_committed(checker: KafkaConsumer, tp: TopicPartition, pred, what: str, timeout: float = DEADLINE):
    """Poll the broker's committed offset (a request each time) until ``pred(offset)``."""
    deadline = time.monotonic() + timeout
    while True:
        got = checker.committed(tp)
        if pred(got):
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what} (committed: {got})"
        threading.Event().wait(0.1)   # pace the requests; the condition is re-checked


# ---------------------------------------------------------------------------- tests
def test_every_record_handled_exactly_once_and_committed(cluster, topic_name, group_id, create_topic):
    n, parts = 2000, 4
    create_topic(cluster, topic_name, parts)
    produce(cluster, topic_name, n, parts, keys=50)
    # Subscribed at construction, as in docs/parallel.md's example: ParallelConsumer re-subscribes
    # with its listener, which calls the application's afterwards.
    consumer = new_consumer(cluster, group_id, topic_name)
    events = []

    class AppListener:
        def on_partitions_revoked(self, revoked):
            events.append(("revoked", set(revoked)))

        def on_partitions_assigned(self, assigned):
            events.append(("assigned", set(assigned)))

    seen = Seen()
    try:
        pc = ParallelConsumer(consumer, max_workers=32, ordering="key", listener=AppListener(),
                              commit_interval_ms=100)
        runner = Runner(pc, seen.add)
        seen.wait(lambda: len(seen.handled) >= n, f"{n} records")
        runner.finish()
        assert runner.error is None
        pairs = seen.pairs()
        assert len(pairs) == n and set(pairs) == all_pairs(n, parts)
        assert committed(consumer, topic_name, parts) == {p: n // parts for p in range(parts)}
        assert ("assigned", {TopicPartition(topic_name, p) for p in range(parts)}) in events
        m = pc.metrics()
        assert (m.completed, m.failed, m.in_flight, m.queued) == (n, 0, 0, 0)
        assert consumer.paused() == set()
    finally:
        shutdown(consumer)


@pytest.mark.parametrize("ordering", ["key", "partition"])
def test_ordering_is_kept(cluster, topic_name, group_id, create_topic, ordering):
    n, parts = 1200, 2
    create_topic(cluster, topic_name, parts)
    produce(cluster, topic_name, n, parts, keys=12)
    consumer = assigned_consumer(cluster, group_id, topic_name, parts)
    started: list[tuple[int, bytes, int]] = []   # (partition, key, offset) at handler entry
    lock = threading.Lock()
    running = {p: 0 for p in range(parts)}
    overlap = []
    seen = Seen()

    def handle(r):
        with lock:
            started.append((r.partition, r.key, r.offset))
            running[r.partition] += 1
            overlap.append(running[r.partition])
        threading.Event().wait(0)            # let other workers in between entry and exit
        with lock:
            running[r.partition] -= 1
        seen.add(r)

    try:
        pc = ParallelConsumer(consumer, max_workers=16, ordering=ordering)
        runner = Runner(pc, handle)
        seen.wait(lambda: len(seen.handled) >= n, f"{n} records")
        runner.finish()
        assert runner.error is None
        assert len(started) == n
        order = {}
        for p, key, offset in started:
            group = (p, key) if ordering == "key" else p
            order.setdefault(group, []).append(offset)
        for group, offsets in order.items():
            assert offsets == sorted(offsets), f"{group} handled out of order"
        if ordering == "partition":
            assert max(overlap) == 1                      # never two records of a partition at once
    finally:
        shutdown(consumer)


def test_more_handlers_run_at_once_than_partitions(cluster, topic_name, group_id, create_topic):
    n, parts, want = 200, 2, 8
    create_topic(cluster, topic_name, parts)
    produce(cluster, topic_name, n, parts)                # keyless: each record its own key
    consumer = assigned_consumer(cluster, group_id, topic_name, parts)
    lock = threading.Lock()
    state = {"now": 0, "max": 0}
    reached = threading.Event()
    seen = Seen()

    def handle(r):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            if state["now"] >= want:
                reached.set()
        reached.wait(DEADLINE)                            # hold on until `want` run together
        with lock:
            state["now"] -= 1
        seen.add(r)

    try:
        pc = ParallelConsumer(consumer, max_workers=16, ordering="key")
        runner = Runner(pc, handle)
        seen.wait(lambda: len(seen.handled) >= n, f"{n} records")
        pc.close()                                        # from another thread: stops run() and waits
        assert pc.metrics().in_flight == 0                # its shutdown is over when close() returns
        runner.join()
        assert runner.error is None
        assert reached.is_set() and state["max"] >= want > parts
        assert pc.metrics().max_in_flight >= want
    finally:
        shutdown(consumer)


def test_a_blocked_record_holds_the_commit_until_released(cluster, topic_name, group_id, create_topic):
    n, blocked = 200, 50
    create_topic(cluster, topic_name, 1)
    produce(cluster, topic_name, n, 1)
    tp = TopicPartition(topic_name, 0)
    consumer = assigned_consumer(cluster, group_id, topic_name, 1)
    checker = new_consumer(cluster, group_id)             # reads the group's offsets, joins nothing
    gate = threading.Event()
    seen = Seen()

    def handle(r):
        if r.offset == blocked:
            gate.wait(DEADLINE)
        seen.add(r)

    try:
        pc = ParallelConsumer(consumer, max_workers=8, ordering="unordered", commit_interval_ms=50)
        runner = Runner(pc, handle)
        seen.wait(lambda: len(seen.handled) >= n - 1, "every record but the blocked one")
        # Everything after it completed, yet the commit (every 50 ms) stops at the running record.
        seen.wait(lambda: pc.metrics().partitions[tp].committed == blocked, f"commit confirmed at {blocked}")
        assert wait_committed(checker, tp, lambda o: o is not None, "a commit") == blocked
        part = pc.metrics().partitions[tp]
        assert (part.committable, part.in_flight, part.commit_lag) == (blocked, 1, n - blocked)
        assert checker.committed(tp) == blocked
        gate.set()
        wait_committed(checker, tp, lambda o: o == n, f"commit jumping to {n}")
        runner.finish()
        assert runner.error is None
        assert sorted(o for _, o in seen.pairs()) == list(range(n))
    finally:
        gate.set()
        checker.close()
        shutdown(consumer)


def test_backpressure_keeps_the_queue_bounded(cluster, topic_name, group_id, create_topic):
    n, bound, workers = 3000, 100, 4
    create_topic(cluster, topic_name, 1)
    produce(cluster, topic_name, n, 1)
    tp = TopicPartition(topic_name, 0)
    consumer = assigned_consumer(cluster, group_id, topic_name, 1)
    gate = threading.Event()
    seen = Seen()
    queued_seen = []
    holder = {}

    def handle(r):
        gate.wait(DEADLINE)
        queued_seen.append(holder["pc"].metrics().queued)
        seen.add(r)

    try:
        pc = holder["pc"] = ParallelConsumer(consumer, max_workers=workers, ordering="unordered",
                                             max_queued_records=bound)
        runner = Runner(pc, handle)

        def full(m):
            return m.paused and tp in m.partitions and m.partitions[tp].paused and m.in_flight == workers
        seen.wait(lambda: full(pc.metrics()), "every worker busy and fetching paused")
        m = pc.metrics()
        assert m.queued <= bound
        # Nothing more is fetched while paused: what came in is the queue plus the running few.
        assert m.partitions[tp].received <= bound + workers
        gate.set()
        seen.wait(lambda: len(seen.handled) >= n, f"{n} records")
        runner.finish()
        assert runner.error is None
        assert max(queued_seen) <= bound
        assert sorted(o for _, o in seen.pairs()) == list(range(n))
        assert consumer.paused() == set()              # left as it was found
    finally:
        gate.set()
        shutdown(consumer)


def test_on_error_raise_stops_and_commits_only_what_completed(cluster, topic_name, group_id, create_topic):
    n, bad = 100, 40
    create_topic(cluster, topic_name, 1)
    produce(cluster, topic_name, n, 1)
    tp = TopicPartition(topic_name, 0)
    consumer = assigned_consumer(cluster, group_id, topic_name, 1)
    seen = Seen()

    def handle(r):
        if r.offset == bad:
            raise ValueError("cannot handle this one")
        seen.add(r)

    try:
        pc = ParallelConsumer(consumer, max_workers=8, ordering="partition")
        runner = Runner(pc, handle)
        runner.join()
        assert isinstance(runner.error, HandlerError)
        assert (runner.error.partition, runner.error.offset) == (0, bad)
        assert isinstance(runner.error.__cause__, ValueError)
        assert sorted(o for _, o in seen.pairs()) == list(range(bad))
        assert consumer.committed(tp) == bad
        assert pc.metrics().failed == 1
    finally:
        shutdown(consumer)


def test_on_error_skip_with_retries(cluster, topic_name, group_id, create_topic):
    n = 100
    create_topic(cluster, topic_name, 1)
    produce(cluster, topic_name, n, 1)
    tp = TopicPartition(topic_name, 0)
    consumer = assigned_consumer(cluster, group_id, topic_name, 1)
    attempts: dict[int, int] = {}
    seen = Seen()

    def handle(r):
        attempts[r.offset] = attempts.get(r.offset, 0) + 1
        if r.offset == 10 or (r.offset == 20 and attempts[r.offset] == 1):
            raise ConnectionError("flaky")
        seen.add(r)

    try:
        pc = ParallelConsumer(consumer, max_workers=4, ordering="partition", on_error="skip", retries=2,
                              retry_backoff_ms=1)
        runner = Runner(pc, handle)
        seen.wait(lambda: len(seen.handled) >= n - 1, "every record but the skipped one")
        seen.wait(lambda: pc.metrics().completed + pc.metrics().skipped == n, "the skip to be counted")
        runner.finish()
        assert runner.error is None
        assert attempts[10] == 3 and attempts[20] == 2
        m = pc.metrics()
        assert (m.completed, m.failed, m.skipped, m.retries) == (n - 1, 1, 1, 3)
        assert consumer.committed(tp) == n                # skipped records count as done
    finally:
        shutdown(consumer)


CHILD = textwrap.dedent("""
    import os, sys, threading
    from kclient import KafkaConsumer
    from kclient.parallel import ParallelConsumer

    bootstrap, topic, group, log_path, blocked = sys.argv[1:6]
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    never = threading.Event()

    def handle(r):
        if r.partition == 0 and r.offset == int(blocked):
            never.wait()                    # stuck until the process is killed
        os.write(fd, b"%d %d\\n" % (r.partition, r.offset))   # one write: survives SIGKILL whole

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    with ParallelConsumer(consumer, max_workers=8, ordering="unordered", commit_interval_ms=50) as pc:
        pc.run(handle)
""")


def read_log(path) -> list[tuple[int, int]]:
    try:
        with open(path, "rb") as f:
            return [tuple(map(int, line.split())) for line in f.read().splitlines() if line]
    except FileNotFoundError:
        return []


def test_sigkill_mid_run_then_restart_loses_nothing(kafka, topic_name, group_id, create_topic, tmp_path):
    cluster = kafka   # Apache Kafka only: the slowest of the module; Tansu runs the others
    n, parts, blocked = 2000, 4, 100
    create_topic(cluster, topic_name, parts)
    produce(cluster, topic_name, n, parts)
    script, log1 = tmp_path / "child.py", tmp_path / "handled-1.log"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, str(script), cluster.bootstrap, topic_name, group_id, str(log1),
                              str(blocked)], env=env, stdin=subprocess.DEVNULL)
    checker = new_consumer(cluster, group_id)
    tp0 = TopicPartition(topic_name, 0)
    try:
        # The stuck record holds partition 0's commit at `blocked` while the rest goes on.
        wait_committed(checker, tp0, lambda o: o == blocked, f"the child committing {blocked}")
        seen = Seen()
        seen.wait(lambda: len(read_log(log1)) >= n // 4 or child.poll() is not None, "the child handling records")
        assert child.poll() is None, f"child exited with {child.returncode}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    first = read_log(log1)
    at_kill = committed(checker, topic_name, parts)
    assert at_kill[0] == blocked
    for p, end in at_kill.items():                         # nothing committed that was not handled
        assert all((p, o) in set(first) for o in range(end or 0)), f"partition {p} committed past unhandled records"

    consumer = new_consumer(cluster, group_id, topic_name)
    seen = Seen()
    try:
        pc = ParallelConsumer(consumer, max_workers=8, ordering="unordered", commit_interval_ms=50)
        runner = Runner(pc, seen.add)
        everything = all_pairs(n, parts)
        seen.wait(lambda: set(first) | set(seen.pairs()) >= everything, "every record handled at least once")
        # The child may have handled records it was killed before committing (its commits run
        # every 50 ms): the restarted run handles those again and commits them, which can come
        # after the last record is seen handled. Stop the run once everything is committed.
        for p in range(parts):
            wait_committed(checker, TopicPartition(topic_name, p), lambda o: o == n // parts,
                           f"partition {p} committed to its end")
        runner.finish()
        assert runner.error is None
        second = seen.pairs()
        again = [(p, o) for p, o in second if o < (at_kill[p] or 0)]
        assert not again, f"records before the committed offset handled again: {again[:5]}"
        assert (0, blocked) in second                      # the stuck record was handled this time
        assert committed(consumer, topic_name, parts) == {p: n // parts for p in range(parts)}
    finally:
        shutdown(consumer)
        checker.close()


def test_a_rebalance_while_handlers_run_loses_nothing(kafka, topic_name, group_id, create_topic):
    cluster = kafka   # Apache Kafka only: the slowest of the module; Tansu runs the others
    n, parts = 2000, 4
    create_topic(cluster, topic_name, parts)
    produce(cluster, topic_name, n, parts)
    seen = Seen()
    gate = threading.Event()
    events = {"a": [], "b": []}

    class AppListener:
        def __init__(self, who):
            self.who = who

        def on_partitions_revoked(self, revoked):
            with seen.cond:
                events[self.who].append(("revoked", set(revoked)))
                seen.cond.notify_all()

        def on_partitions_assigned(self, assigned):
            with seen.cond:
                events[self.who].append(("assigned", set(assigned)))
                seen.cond.notify_all()

    def handle_a(r):
        if r.offset == 10:
            gate.wait(DEADLINE)                          # still running when the group rebalances
        seen.add(r, "a")

    a = new_consumer(cluster, group_id, topic_name)
    b = new_consumer(cluster, group_id)
    try:
        # One record per partition blocks A's partition ("partition" ordering): A's queues hold
        # the rest when B joins; revocation gives up on the blocked records after 1.5 s, commits
        # below them and drops the queues, so the partitions' new owners get all of it again.
        pc_a = ParallelConsumer(a, max_workers=8, ordering="partition", commit_interval_ms=100,
                                revoke_timeout_ms=1500, listener=AppListener("a"))
        run_a = Runner(pc_a, handle_a)
        seen.wait(lambda: len(seen.handled) >= 10 * parts and pc_a.metrics().in_flight == parts,
                  "A blocked in one record per partition")
        pc_b = ParallelConsumer(b, max_workers=8, ordering="partition", commit_interval_ms=100)
        pc_b.subscribe([topic_name], listener=AppListener("b"))
        run_b = Runner(pc_b, lambda r: seen.add(r, "b"))
        seen.wait(lambda: any(k == "revoked" and v for k, v in events["a"]), "A's partitions revoked")
        gate.set()
        everything = all_pairs(n, parts)
        seen.wait(lambda: set(seen.pairs()) >= everything, "every record handled")
        seen.wait(lambda: any(k == "assigned" and v for k, v in events["b"]), "B owning partitions")
        run_b.finish()
        run_a.finish()
        assert run_a.error is None and run_b.error is None
        assert committed(a, topic_name, parts) == {p: n // parts for p in range(parts)}
    finally:
        gate.set()
        shutdown(b, a)

"""Polling several members of one classic group on librdkafka's mock cluster.

The mock completes a SyncGroup round as soon as the leader's SyncGroup arrives with every
member's assignment (rd_kafka_mock_cgrp_classic_sync_check counts assignments, not SyncGroup
requests), moves the group to Up, and answers any SyncGroup it gets in Up with INVALID_REQUEST.
A follower whose SyncGroup reaches the mock after the leader's is refused; Apache Kafka holds
the round until the leader's assignment comes and answers every member. All members read their
JoinGroup answers at the same moment, and a leader that runs the range assignor is as quick to
send its SyncGroup as a follower is. In a probe, once a follower had been refused, it was
refused again in most of the following rounds (2-11 refusals per group, one group of two not
split in 60 s), whether the members were polled in turn or at once.

The harness takes the race away, and leaves the client as it is:

- ``MemberPoller.poll`` polls the members of a group at the same time, one thread each (as
  separate applications would), so a follower sends its SyncGroup while the leader assigns;
- the leader's assignor (``RangeAfterFollowersSync``, range's assignment) returns only once the
  mock's request log shows a SyncGroup from every follower of the round, or after a deadline;
- if the mock refuses a follower anyway, ``poll_member`` turns that one error into an empty
  poll: the client raised it as it should (INVALID_REQUEST is not retriable) after asking to
  rejoin, so the next poll starts a new round.

The mock also never answers a connection whose member it dropped while that member's
JoinGroup or SyncGroup was held: it keeps the connection blocked (it frees the held response
without unblocking), so nothing sent on it is read again. It drops such a member when it saw
nothing from it for the session timeout, which a stall of the mock's process longer than the
session brings about (probed: a 4.5 s SIGSTOP of a 3 s-session group left one member without
partitions for the whole minute, its JoinGroup unanswered). Apache Kafka answers or closes. So
``MOCK_REQUEST_TIMEOUTS`` bounds the wait of a member's coordinator requests on the mock: the
request times out, the client closes the connection and rejoins on a new one. And the leader's
wait for the followers stays under the session timeout (``RangeAfterFollowersSync``), or it
would hold every member's next poll (``MemberPoller.poll`` waits for all) past the mock's
session and sync timers.

On any other cluster the members are polled in turn and errors are raised as they come.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kclient import errors as Errors
from kclient.group.assignors.range import RangeAssignor
from kclient.testing.mock_cluster import MockCluster

log = logging.getLogger(__name__)

JOIN_GROUP, SYNC_GROUP = 11, 14

#: Members' request timeouts on the mock (see above): a JoinGroup times out after
#: max_poll_interval_ms + 5 s (the rebalance timeout and the client's lapse), others after
#: request_timeout_ms, so a member stuck on a blocked connection rejoins within ~15 s.
MOCK_REQUEST_TIMEOUTS = {"request_timeout_ms": 10000, "max_poll_interval_ms": 10000}

#: How often the mock refused a late SyncGroup in this process (logged as it happens).
late_syncs_refused = 0


def is_mock(cluster) -> bool:
    return isinstance(cluster, MockCluster)


def poll_member(consumer, cluster, timeout_ms: int, **kwargs):
    """``consumer.poll(timeout_ms)``; on the mock cluster, a SyncGroup refused with
    INVALID_REQUEST after the round completed gives an empty poll instead of the error."""
    global late_syncs_refused
    try:
        return consumer.poll(timeout_ms=timeout_ms, **kwargs)
    except Errors.InvalidRequestError:
        coordinator = consumer._coordinator
        if not is_mock(cluster) or coordinator is None or not coordinator.rejoin_needed_or_pending():
            raise
        late_syncs_refused += 1
        log.warning("the mock refused a late SyncGroup of group %s (%d so far); the member rejoins",
                    coordinator.group_id, late_syncs_refused)
        return {}


class RangeAfterFollowersSync(RangeAssignor):
    """The range assignor, for the leader on the mock cluster: it returns its assignment once
    the mock has a SyncGroup from each follower of this round (the SyncGroups logged after the
    round's last JoinGroup), or when ``timeout_s`` has passed. ``timeout_s`` stays under the
    members' session timeout (3 s in the suite): the mock ends a sync round after the session
    timeout, and drops a member whose next poll waits behind this one for longer."""

    def __init__(self, cluster: MockCluster, timeout_s: float = 1.5) -> None:
        self.cluster, self.timeout_s = cluster, timeout_s
        self.waits = 0          # rounds in which the followers' SyncGroups were all seen

    def _followers_synced(self) -> int:
        requests = self.cluster.get_requests()
        last_join = max((i for i, r in enumerate(requests) if r.api_key == JOIN_GROUP), default=-1)
        return sum(1 for r in requests[last_join + 1:] if r.api_key == SYNC_GROUP)

    def assign(self, partitions_per_topic, subscriptions):
        followers = len(subscriptions) - 1
        deadline = time.monotonic() + self.timeout_s
        pause = threading.Event()
        while followers > 0:
            if self._followers_synced() >= followers:
                self.waits += 1
                log.info("the mock has the SyncGroups of %d follower(s) after %.3f s", followers,
                         self.timeout_s - (deadline - time.monotonic()))
                break
            if time.monotonic() >= deadline:
                log.warning("the followers' SyncGroups did not reach the mock in %.1f s", self.timeout_s)
                break
            pause.wait(0.005)
        return super().assign(partitions_per_topic, subscriptions)


class MemberPoller:
    """Polls the members of one group. On the mock cluster: all at once (one thread per
    member), members created with ``consumer_settings()`` assign with RangeAfterFollowersSync,
    and the mock records requests while the poller is open."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.on_mock = is_mock(cluster)
        self._threads: dict[int, ThreadPoolExecutor] = {}
        if self.on_mock:
            cluster.start_request_tracking()
            self.assignor = RangeAfterFollowersSync(cluster)

    def consumer_settings(self) -> dict:
        """KafkaConsumer keywords the members need on the mock: the waiting assignor and
        bounded request timeouts."""
        if not self.on_mock:
            return {}
        return {"partition_assignment_strategy": [self.assignor], **MOCK_REQUEST_TIMEOUTS}

    def poll(self, consumers, timeout_ms: int) -> list[dict]:
        """One poll of each consumer; their results in the same order."""
        if not self.on_mock:
            return [c.poll(timeout_ms=timeout_ms) for c in consumers]
        futures = []
        for c in consumers:
            thread = self._threads.get(id(c))
            if thread is None:
                thread = self._threads[id(c)] = ThreadPoolExecutor(1, thread_name_prefix="member")
            futures.append(thread.submit(poll_member, c, self.cluster, timeout_ms))
        return [f.result() for f in futures]

    def close(self) -> None:
        for thread in self._threads.values():
            thread.shutdown(wait=True)
        self._threads.clear()
        if self.on_mock:
            self.cluster.stop_request_tracking()

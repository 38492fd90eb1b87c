"""A small admin client: topics, partitions, records, offsets, consumer groups, and share groups
and group configs (kclient.admin_share_groups), with kafka-python's method names.

Every call blocks until the cluster answered (or its timeout passed) and drives the network
from the calling thread. Topic creation and deletion, and adding partitions, return only once
this client's metadata shows the change, so a consumer or producer created afterwards sees it
too.
"""
from __future__ import annotations

import logging
from collections import namedtuple
from typing import Any, Iterable, Mapping

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.config import ADMIN_CONFIGS, AdminClientConfig
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.metadata import Node
from kclient.network.network_config import NetworkClientConfig
from kclient.consumer.offset_fetcher import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, ISOLATION,
                                    list_offsets_body, parse_list_offsets)
from kclient.structs import OffsetAndMetadata, TopicPartition
from kclient.protocol import ApiKey
from kclient.admin_share_groups import (ConfigEntry, ShareGroupAdmin, ShareGroupDescription, ShareGroupListing,
                                        ShareMemberDescription, SharePartitionOffsetInfo)

__all__ = ["KafkaAdminClient", "NewTopic", "NewPartitions", "OffsetSpec", "ListOffsetsResultInfo",
           "GroupDescription", "MemberDescription", "AdminClientConfig", "ADMIN_CONFIGS",
           "ShareGroupDescription", "ShareMemberDescription", "ShareGroupListing", "SharePartitionOffsetInfo",
           "ConfigEntry"]

log = logging.getLogger(__name__)

CREATE_TOPICS, DELETE_TOPICS, LIST_OFFSETS, FIND_COORDINATOR = (
    int(k) for k in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.LIST_OFFSETS, ApiKey.FIND_COORDINATOR))
DESCRIBE_GROUPS, LIST_GROUPS, OFFSET_FETCH = (
    int(k) for k in (ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.OFFSET_FETCH))
CREATE_PARTITIONS, DELETE_RECORDS = (int(k) for k in (ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_RECORDS))


class NewTopic:
    """A topic to create (kafka-python's kafka.admin.NewTopic)."""

    def __init__(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignments: dict[int, list[int]] | None = None,
                 topic_configs: dict[str, str] | None = None):
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignments = replica_assignments or {}
        self.topic_configs = topic_configs or {}

    def __repr__(self) -> str:
        return (f"NewTopic(name={self.name!r}, num_partitions={self.num_partitions}, "
                f"replication_factor={self.replication_factor})")


class NewPartitions:
    """A topic's new partition count (kafka-python's kafka.admin.NewPartitions).

    ``new_assignments``: optionally, for each partition added (total_count minus the current
    count of them), the broker ids of its replicas, preferred leader first; without it the
    cluster places them."""

    def __init__(self, total_count: int, new_assignments: list[list[int]] | None = None):
        self.total_count = total_count
        self.new_assignments = new_assignments

    def __repr__(self) -> str:
        return f"NewPartitions(total_count={self.total_count}, new_assignments={self.new_assignments!r})"


class OffsetSpec:
    """What ``list_offsets`` looks up: the constants below, or a timestamp in ms."""

    EARLIEST = EARLIEST_TIMESTAMP
    LATEST = LATEST_TIMESTAMP
    MAX_TIMESTAMP = MAX_TIMESTAMP

    @staticmethod
    def earliest() -> int:
        return EARLIEST_TIMESTAMP

    @staticmethod
    def latest() -> int:
        return LATEST_TIMESTAMP

    @staticmethod
    def for_timestamp(ts_ms: int) -> int:
        if ts_ms < 0:
            raise Errors.IllegalArgumentError(f"timestamp must be >= 0, got {ts_ms}")
        return ts_ms


ListOffsetsResultInfo = namedtuple("ListOffsetsResultInfo", ["offset", "timestamp", "leader_epoch"])
MemberDescription = namedtuple(
    "MemberDescription",
    ["member_id", "group_instance_id", "client_id", "client_host", "member_metadata",
     "member_assignment"])
GroupDescription = namedtuple(
    "GroupDescription",
    ["group", "state", "protocol_type", "protocol", "members", "authorized_operations"])


def _raise_topic_error(code: int, message: str | None, what: str) -> BaseException:
    cls = Errors.error_class(code)
    return cls(f"{what}: {message}" if message else what)


def _new_partitions(topic: Any, spec: Any) -> NewPartitions:
    if isinstance(spec, NewPartitions):
        out = spec
    elif isinstance(spec, int) and not isinstance(spec, bool):
        out = NewPartitions(spec)
    elif isinstance(spec, Mapping) and "count" in spec:
        out = NewPartitions(spec["count"], spec.get("assignments"))
    else:
        raise Errors.IllegalArgumentError(
            f"create_partitions: topic {topic!r} needs a NewPartitions (or a partition count), got {spec!r}")
    if isinstance(out.total_count, bool) or not isinstance(out.total_count, int):
        raise Errors.IllegalArgumentError(
            f"create_partitions: the partition count of topic {topic!r} must be an int, got {out.total_count!r}")
    return out


class KafkaAdminClient(ShareGroupAdmin):
    def __init__(self, configs: Mapping[str, Any] | None = None, *, clock: Clock | None = None,
                 **kwargs: Any):
        self.config = AdminClientConfig(configs, **kwargs)
        self._clock = clock or SYSTEM_CLOCK
        self._client = ConsumerNetworkClient(config=NetworkClientConfig.of(self.config), clock=self._clock,
                                             max_response_bytes=self.config["receive.message.max.bytes"])
        self._metadata = self._client.metadata
        self._timeout_ms = self.config["default.api.timeout.ms"]
        self._closed = False

    # ------------------------------------------------------------------ plumbing
    def _deadline(self, timeout_ms: int | None) -> int:
        return self._clock.now_ms() + (self._timeout_ms if timeout_ms is None else int(timeout_ms))

    def _left(self, deadline: int) -> int:
        return max(deadline - self._clock.now_ms(), 0)

    def _bootstrap(self, deadline: int) -> None:
        if self._closed:
            raise Errors.IllegalStateError("the admin client is closed")
        self._client.ensure_bootstrapped(self._left(deadline))

    def _call(self, node, api_key: int, body, deadline: int, *, version: int | None = None) -> dict:
        fut = self._client.send(node, api_key, body, version=version)
        if not self._client.poll_future(fut, self._left(deadline)):
            raise Errors.KafkaTimeoutError(f"no answer to request {api_key} from node {fut.node_id} in time")
        if fut.failed():
            raise fut.exception
        return fut.value

    def _any_node(self, deadline: int) -> int:
        while True:
            node = self._client.least_loaded_node()
            if node is not None:
                return node
            if self._left(deadline) <= 0:
                raise Errors.NoBrokersAvailable("no broker is available")
            self._client.poll(min(self._left(deadline), 100))

    def _negotiated(self, node, api_key: int, deadline: int) -> int | None:
        """The version the node's connection negotiated for api_key (connecting first)."""
        while not self._client.try_connect(node):
            if self._left(deadline) <= 0:
                raise Errors.KafkaTimeoutError(f"could not connect to node {node} in time")
            self._client.poll(min(self._left(deadline), 50))
        return self._client.api_version(node, api_key)

    def _controller(self, deadline: int) -> int:
        self._bootstrap(deadline)
        controller = self._metadata.cluster.controller_id
        if controller is None or controller < 0 or self._metadata.cluster.node_by_id(controller) is None:
            return self._any_node(deadline)
        return controller

    def _refresh(self, deadline: int) -> None:
        self._client.await_metadata_update(self._left(deadline))

    def _with_retries(self, deadline: int, attempt):
        """Run attempt() until it returns without a retriable error or the deadline passes."""
        while True:
            try:
                return attempt()
            except Errors.KafkaError as exc:
                if not (exc.retriable or exc.invalid_metadata or isinstance(exc, Errors.NotControllerError)):
                    raise
                if self._left(deadline) <= 0:
                    raise
                log.debug("admin request failed (%s); refreshing metadata and retrying", exc)
                self._refresh(deadline)

    # ------------------------------------------------------------------ topics
    def create_topics(self, new_topics: Iterable[NewTopic], timeout_ms: int | None = None,
                      validate_only: bool = False, raise_errors: bool = True) -> dict[str, BaseException | None]:
        """Create topics; waits until metadata shows every partition with a leader.

        Returns {name: None | error}; with raise_errors (default) the first error is raised
        (e.g. TopicAlreadyExistsError)."""
        topics = list(new_topics)
        deadline = self._deadline(timeout_ms)
        api_timeout = self._timeout_ms if timeout_ms is None else int(timeout_ms)
        body = {"topics": [{
            "name": t.name, "num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
            "assignments": [{"partition_index": p, "broker_ids": list(b)} for p, b in t.replica_assignments.items()],
            "configs": [{"name": k, "value": v} for k, v in t.topic_configs.items()],
        } for t in topics], "timeout_ms": api_timeout, "validate_only": validate_only}

        results = self._topic_request(CREATE_TOPICS, body, deadline, "topics", "CreateTopics",
                                      "creating", raise_errors)
        if not validate_only:
            created = {t.name: t.num_partitions for t in topics if results.get(t.name) is None}
            self._wait_for_topics(created, deadline)
        return results

    def _topic_request(self, api_key: int, body, deadline: int, results_key: str, api_name: str,
                       verb: str, raise_errors: bool) -> dict[str, BaseException | None]:
        """Send a per-topic controller request (CreateTopics/DeleteTopics) with retries; the
        error of each topic, or None. NOT_CONTROLLER retries against the refreshed controller."""
        def attempt():
            response = self._call(self._controller(deadline), api_key, body, deadline)
            results = {}
            for r in response.get(results_key) or []:
                code = r.get("error_code", 0)
                if code == Errors.NotControllerError.errno:
                    raise Errors.NotControllerError(f"{api_name} reached a broker that is not the controller")
                results[r["name"]] = None if code == 0 else _raise_topic_error(
                    code, r.get("error_message"), f"{verb} topic {r['name']!r} failed")
            return results

        results = self._with_retries(deadline, attempt)
        if raise_errors:
            for err in results.values():
                if err is not None:
                    raise err
        return results

    def _wait_for_topics(self, topics: dict[str, int], deadline: int) -> None:
        if not topics:
            return
        self._metadata.add_topics(*topics)

        def ready() -> bool:
            cluster = self._metadata.cluster
            for name, n in topics.items():
                parts = cluster.partitions_for_topic(name)
                if not parts or (n > 0 and len(parts) < n) or any(p.leader < 0 for p in parts):
                    return False
            return True

        while not ready():
            if self._left(deadline) <= 0:
                raise Errors.KafkaTimeoutError(f"topics {sorted(topics)} did not appear in metadata in time")
            self._client.await_metadata_update(min(self._left(deadline), 1000))

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None,
                      raise_errors: bool = True) -> dict[str, BaseException | None]:
        """Delete topics; waits until metadata no longer shows them."""
        names = list(topics)
        deadline = self._deadline(timeout_ms)
        api_timeout = self._timeout_ms if timeout_ms is None else int(timeout_ms)

        def body(version: int) -> dict:
            if version >= 6:
                return {"topics": [{"name": n} for n in names], "timeout_ms": api_timeout}
            return {"topic_names": names, "timeout_ms": api_timeout}

        results = self._topic_request(DELETE_TOPICS, body, deadline, "responses", "DeleteTopics",
                                      "deleting", raise_errors)
        gone = [n for n in names if results.get(n) is None]
        if gone:
            self._metadata.add_topics(*gone)
            while any(self._metadata.cluster.partitions_for_topic(n) for n in gone):
                if self._left(deadline) <= 0:
                    raise Errors.KafkaTimeoutError(f"topics {gone} still in metadata after deletion")
                self._client.await_metadata_update(min(self._left(deadline), 1000))
            self._metadata.set_topics(self._metadata.topics - set(gone))
        return results

    def create_partitions(self, topic_partitions: Mapping[str, NewPartitions | int | Mapping[str, Any]],
                          timeout_ms: int | None = None, validate_only: bool = False,
                          raise_errors: bool = True) -> dict[str, BaseException | None]:
        """Grow topics to ``NewPartitions.total_count`` partitions (a plain count, or kafka-python's
        ``{"count": n, "assignments": [[broker ids], ...]}``, is accepted too); waits until
        metadata shows every new partition with a leader.

        Returns {topic: None | error}; with raise_errors (default) the first error is raised
        (InvalidPartitionsError for a count not above the current one, UnknownTopicOrPartitionError
        for a missing topic...). validate_only asks the cluster to check the request and change
        nothing."""
        wanted = {str(name): _new_partitions(name, spec) for name, spec in topic_partitions.items()}
        deadline = self._deadline(timeout_ms)
        api_timeout = self._timeout_ms if timeout_ms is None else int(timeout_ms)
        body = {"topics": [{
            "name": name, "count": np.total_count,
            "assignments": None if np.new_assignments is None
            else [{"broker_ids": [int(b) for b in ids]} for ids in np.new_assignments],
        } for name, np in wanted.items()], "timeout_ms": api_timeout, "validate_only": bool(validate_only)}

        results = self._topic_request(CREATE_PARTITIONS, body, deadline, "results", "CreatePartitions",
                                      "adding partitions to", raise_errors)
        if not validate_only:
            grown = {name: np.total_count for name, np in wanted.items() if results.get(name) is None}
            self._wait_for_topics(grown, deadline)
        return results

    def list_topics(self, timeout_ms: int | None = None) -> list[str]:
        deadline = self._deadline(timeout_ms)
        self._bootstrap(deadline)
        self._metadata.set_need_all_topics(True)
        try:
            self._refresh(deadline)
            return sorted(self._metadata.cluster.topics())
        finally:
            self._metadata.set_need_all_topics(False)

    def describe_topics(self, topics: Iterable[str], timeout_ms: int | None = None) -> dict:
        """{topic: [PartitionInfo, ...]} from the metadata."""
        names = list(topics)
        deadline = self._deadline(timeout_ms)
        self._bootstrap(deadline)
        self._metadata.add_topics(*names)
        self._refresh(deadline)
        return {n: list(self._metadata.cluster.partitions_for_topic(n) or ()) for n in names}

    # ------------------------------------------------------------------ offsets
    def list_offsets(self, topic_partition_offsets: Mapping[TopicPartition, int],
                     isolation_level: str = "read_uncommitted", timeout_ms: int | None = None,
                     ) -> dict[TopicPartition, ListOffsetsResultInfo]:
        """{tp: OffsetSpec.EARLIEST | OffsetSpec.LATEST | OffsetSpec.MAX_TIMESTAMP | timestamp}
        -> {tp: ListOffsetsResultInfo(offset, timestamp, leader_epoch)} (offset -1: none)."""
        deadline = self._deadline(timeout_ms)
        self._bootstrap(deadline)
        wanted = {TopicPartition(*tp): int(spec) for tp, spec in topic_partition_offsets.items()}
        self._metadata.add_topics(*{tp.topic for tp in wanted})
        iso = ISOLATION[isolation_level]
        out: dict[TopicPartition, ListOffsetsResultInfo] = {}
        while True:
            cluster = self._metadata.cluster
            by_node: dict[int, dict] = {}
            for tp, spec in wanted.items():
                if tp in out:
                    continue
                leader = cluster.leader_for(tp)
                if leader is not None:
                    epoch = cluster.leader_epoch(tp)
                    by_node.setdefault(leader.node_id, {})[tp] = (spec, -1 if epoch is None else epoch)
            for node, parts in by_node.items():
                try:
                    response = self._call(node, LIST_OFFSETS, list_offsets_body(parts, iso, self._left(deadline)),
                                          deadline)
                except Errors.KafkaError as exc:
                    if not (exc.retriable or exc.invalid_metadata):
                        raise
                    continue
                for tp, (code, offset, ts, epoch) in parse_list_offsets(response).items():
                    if tp not in parts:
                        continue
                    if code == 0:
                        out[tp] = ListOffsetsResultInfo(offset, ts, epoch)
                    elif not (Errors.error_class(code).retriable or Errors.error_class(code).invalid_metadata):
                        raise Errors.error_class(code)(f"ListOffsets for {tp} failed")
            if len(out) == len(wanted):
                return out
            if self._left(deadline) <= 0:
                raise Errors.KafkaTimeoutError(f"no offsets for {sorted(set(wanted) - set(out))} in time")
            self._client.await_metadata_update(min(self._left(deadline), 1000))

    def delete_records(self, records_to_delete: Mapping[TopicPartition, int], timeout_ms: int | None = None,
                       partition_leader_id: int | None = None) -> dict[TopicPartition, int]:
        """Delete every record before the given offset of each partition (offset -1: up to the
        high watermark), asking each partition's leader; returns {tp: new low watermark}.

        A partition's error raises the matching error naming it (OffsetOutOfRangeError for an
        offset past the high watermark, UnknownTopicOrPartitionError for a partition the
        cluster does not have...); partitions whose leader moved are retried on the new leader
        until the timeout. ``partition_leader_id`` sends every request to that broker instead
        and does not retry a NOT_LEADER_OR_FOLLOWER answer (the caller said where the leader is)."""
        wanted: dict[TopicPartition, int] = {}
        for tp, offset in records_to_delete.items():
            tp = TopicPartition(*tp)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
                raise Errors.IllegalArgumentError(
                    f"delete_records: the offset for {tp.topic}-{tp.partition} must be an int >= 0 (or -1 for the "
                    f"high watermark), got {offset!r}")
            wanted[tp] = offset
        deadline = self._deadline(timeout_ms)
        api_timeout = self._timeout_ms if timeout_ms is None else int(timeout_ms)
        self._bootstrap(deadline)
        if partition_leader_id is None and wanted:
            self._metadata.add_topics(*{tp.topic for tp in wanted})
            self._refresh(deadline)
        out: dict[TopicPartition, int] = {}
        failed: dict[TopicPartition, BaseException] = {}
        pending = dict(wanted)
        while pending:
            retry: list[str] = []
            for node, parts in self._records_by_leader(pending, partition_leader_id, failed).items():
                body = {"topics": [{"name": topic, "partitions": [
                    {"partition_index": tp.partition, "offset": off} for tp, off in sorted(parts.items())
                    if tp.topic == topic]} for topic in sorted({tp.topic for tp in parts})],
                    "timeout_ms": api_timeout}
                try:
                    response = self._call(node, DELETE_RECORDS, body, deadline)
                except Errors.KafkaError as exc:
                    if not (exc.retriable or exc.invalid_metadata) or self._left(deadline) <= 0:
                        raise
                    retry.append(f"node {node}: {exc}")
                    continue
                for t in response.get("topics") or []:
                    for p in t.get("partitions") or []:
                        tp = TopicPartition(t["name"], p["partition_index"])
                        if tp not in parts:
                            continue
                        code = p.get("error_code", 0)
                        if code == 0:
                            out[tp] = p["low_watermark"]
                            del pending[tp]
                            continue
                        cls = Errors.error_class(code)
                        pinned_not_leader = (partition_leader_id is not None
                                             and cls is Errors.NotLeaderOrFollowerError)
                        if (cls.retriable or cls.invalid_metadata) and not pinned_not_leader \
                                and self._left(deadline) > 0:
                            retry.append(f"{tp.topic}-{tp.partition}: {cls.__name__}")
                            continue
                        failed[tp] = cls(f"deleting the records of {tp.topic}-{tp.partition} before offset "
                                         f"{parts[tp]} failed ({cls.__name__})")
                        del pending[tp]
            for tp in list(pending):
                if tp in failed:
                    del pending[tp]
            if not pending:
                break
            if self._left(deadline) <= 0:
                left = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending))
                raise Errors.KafkaTimeoutError(f"deleting records of {left} did not complete in time"
                                               + (f" (last: {'; '.join(retry)})" if retry else ""))
            log.debug("delete_records: retrying after %s", "; ".join(retry) or "no leader known")
            self._client.await_metadata_update(min(self._left(deadline), 1000))
        if failed:
            first = min(failed)
            err = failed[first]
            if len(failed) > 1:
                others = "; ".join(str(failed[tp]) for tp in sorted(failed) if tp != first)
                err = type(err)(f"{err}; also: {others}")
            raise err
        return out

    def _records_by_leader(self, pending: dict[TopicPartition, int], pinned: int | None,
                           failed: dict[TopicPartition, BaseException]) -> dict[int, dict[TopicPartition, int]]:
        """Pending partitions grouped by the node to ask; partitions the fresh metadata says do
        not exist go to ``failed``, those without a leader yet wait for the next round."""
        if pinned is not None:
            return {int(pinned): dict(pending)}
        cluster = self._metadata.cluster
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, offset in pending.items():
            leader = cluster.leader_for(tp)
            if leader is not None:
                by_node.setdefault(leader.node_id, {})[tp] = offset
                continue
            code = cluster.topic_errors.get(tp.topic, 0)
            parts = cluster.partitions_for_topic(tp.topic)
            if code == Errors.UnknownTopicOrPartitionError.errno or (parts and tp.partition not in
                                                                      {p.partition for p in parts}):
                failed[tp] = Errors.UnknownTopicOrPartitionError(
                    f"deleting the records of {tp.topic}-{tp.partition}: the cluster has no such partition")
            elif code and not (Errors.error_class(code).retriable or Errors.error_class(code).invalid_metadata):
                failed[tp] = Errors.error_class(code)(
                    f"deleting the records of {tp.topic}-{tp.partition}: metadata of {tp.topic!r} failed")
        return by_node

    # ------------------------------------------------------------------ groups
    def _find_coordinator(self, group_id: str, deadline: int) -> Node:
        def body(version: int) -> dict:
            if version >= 4:
                return {"key_type": 0, "coordinator_keys": [group_id]}
            return {"key": group_id, "key_type": 0}

        def attempt():
            response = self._call(self._any_node(deadline), FIND_COORDINATOR, body, deadline)
            if "coordinators" in response and response["coordinators"]:
                c = response["coordinators"][0]
            else:
                c = response
            code = c.get("error_code", 0)
            if code:
                raise _raise_topic_error(code, c.get("error_message"), f"FindCoordinator for group {group_id!r}")
            return Node(c["node_id"], c["host"], c["port"])

        self._bootstrap(deadline)
        return self._with_retries(deadline, attempt)

    def describe_consumer_groups(self, group_ids: Iterable[str], group_coordinator_id: int | None = None,
                                 include_authorized_operations: bool = False,
                                 timeout_ms: int | None = None) -> list[GroupDescription]:
        deadline = self._deadline(timeout_ms)
        out = []
        for gid in group_ids:
            node = group_coordinator_id if group_coordinator_id is not None else self._find_coordinator(gid, deadline)
            body = {"groups": [gid], "include_authorized_operations": include_authorized_operations}
            response = self._with_retries(
                deadline, lambda node=node, body=body: self._call(node, DESCRIBE_GROUPS, body, deadline))
            for g in response.get("groups") or []:
                code = g.get("error_code", 0)
                if code:
                    raise _raise_topic_error(code, g.get("error_message"), f"describing group {gid!r}")
                members = [self._member(m, g.get("protocol_type")) for m in g.get("members") or []]
                out.append(GroupDescription(g["group_id"], g.get("group_state"), g.get("protocol_type"),
                                            g.get("protocol_data"), members,
                                            g.get("authorized_operations")))
        return out

    describe_groups = describe_consumer_groups

    @staticmethod
    def _member(m: dict, protocol_type: str | None) -> MemberDescription:
        metadata, assignment = m.get("member_metadata"), m.get("member_assignment")
        if protocol_type == "consumer":
            from kclient.group.classic_embedded_protocol import deserialize_assignment, deserialize_subscription
            try:
                metadata = deserialize_subscription(metadata) if metadata else None
                assignment = deserialize_assignment(assignment) if assignment else None
            except Errors.KafkaError as exc:  # keep the raw bytes if a member wrote garbage
                log.debug("cannot decode member %s's protocol data: %s", m.get("member_id"), exc)
        return MemberDescription(m["member_id"], m.get("group_instance_id"), m.get("client_id"),
                                 m.get("client_host"), metadata, assignment)

    def list_consumer_groups(self, broker_ids: Iterable[int] | None = None,
                             timeout_ms: int | None = None) -> list[tuple[str, str]]:
        """[(group_id, protocol_type), ...] from every broker (or the given ones)."""
        deadline = self._deadline(timeout_ms)
        self._bootstrap(deadline)
        if not self._metadata.cluster.nodes() or self._metadata.cluster.is_bootstrap:
            self._refresh(deadline)
        nodes = list(broker_ids) if broker_ids is not None else [n.node_id for n in self._metadata.cluster.nodes()]
        seen: dict[str, str] = {}
        for node in nodes:
            response = self._with_retries(deadline, lambda node=node: self._call(node, LIST_GROUPS, {}, deadline))
            code = response.get("error_code", 0)
            if code:
                raise _raise_topic_error(code, None, f"ListGroups on node {node}")
            for g in response.get("groups") or []:
                seen[g["group_id"]] = g.get("protocol_type", "")
        return sorted(seen.items())

    list_groups = list_consumer_groups

    def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: int | None = None,
                                    partitions: Iterable[TopicPartition] | None = None,
                                    timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of a group (all partitions it committed, or the given ones);
        partitions without a committed offset are left out."""
        deadline = self._deadline(timeout_ms)
        node = group_coordinator_id if group_coordinator_id is not None else self._find_coordinator(group_id, deadline)
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp[0], []).append(tp[1])
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        def body(version: int) -> dict:
            if version >= 8:
                return {"groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                                    "topics": topics}], "require_stable": False}
            return {"group_id": group_id, "topics": topics, "require_stable": False}

        # v10 names topics by id; ids are not needed to read a group's offsets.
        version = self._negotiated(node, OFFSET_FETCH, deadline)
        pinned = min(version, 9) if version is not None else None

        def attempt():
            response = self._call(node, OFFSET_FETCH, body, deadline, version=pinned)
            if "groups" in response and response["groups"] is not None and response.get("groups"):
                g = response["groups"][0]
                code, topics_out = g.get("error_code", 0), g.get("topics") or []
            else:
                code, topics_out = response.get("error_code", 0), response.get("topics") or []
            if code:
                raise _raise_topic_error(code, None, f"OffsetFetch for group {group_id!r}")
            out = {}
            for t in topics_out:
                for p in t.get("partitions") or []:
                    if p.get("error_code", 0):
                        raise _raise_topic_error(p["error_code"], None,
                                                 f"OffsetFetch for {t['name']}-{p['partition_index']}")
                    if p["committed_offset"] >= 0:
                        out[TopicPartition(t["name"], p["partition_index"])] = OffsetAndMetadata(
                            p["committed_offset"], p.get("metadata") or "", p.get("committed_leader_epoch", -1))
            return out

        return self._with_retries(deadline, attempt)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self) -> "KafkaAdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""The admin client's share-group (KIP-932) and group-config operations, in kafka-python's
naming style: describe and list share groups, read, reset and delete their start offsets,
delete them, and read and change a group's configs (``share.auto.offset.reset``,
``share.record.lock.duration.ms``...).

``KafkaAdminClient`` mixes these in; they use its plumbing (``_call``, ``_deadline``,
``_find_coordinator``...).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kclient import errors as Errors
from kclient.protocol import ApiKey
from kclient.structs import TopicPartition

__all__ = ["ShareGroupDescription", "ShareMemberDescription", "ShareGroupListing", "SharePartitionOffsetInfo",
           "ConfigEntry", "ShareGroupAdmin", "GROUP_RESOURCE_TYPE"]

log = logging.getLogger(__name__)

SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = (
    int(k) for k in (ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                     ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS))
LIST_GROUPS, DELETE_GROUPS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = (
    int(k) for k in (ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CONFIGS,
                     ApiKey.INCREMENTAL_ALTER_CONFIGS))

#: ConfigResource type of a group (KIP-848 / KIP-932 group configs).
GROUP_RESOURCE_TYPE = 32
_SET, _DELETE = 0, 1
#: ListGroups filters by group type from v5 on.
_LIST_GROUPS_TYPES_VERSION = 5
_LIST_SHARE_GROUPS = {"states_filter": [], "types_filter": ["share"]}
#: DescribeConfigs' config_source values (Kafka's ConfigSource).
_CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                   3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                   6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}


@dataclass(frozen=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: list[str]
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str                    # Empty, Stable, Dead...
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMemberDescription]
    coordinator_id: int
    authorized_operations: int | None = None


@dataclass(frozen=True)
class ShareGroupListing:
    group_id: str
    state: str


@dataclass(frozen=True)
class SharePartitionOffsetInfo:
    """A share partition's progress: the first offset not yet in a final state (``start_offset``)
    and how many records from there on are not (``lag``; None when the broker does not say)."""
    start_offset: int
    leader_epoch: int | None
    lag: int | None


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    is_sensitive: bool
    synonyms: list[tuple[str, str | None, str]] = field(default_factory=list)


def _error(code: int, message: str | None, what: str) -> BaseException:
    cls = Errors.error_class(code)
    return cls(f"{what}: {message}" if message else what)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in partitions:
        tp = TopicPartition(*tp)
        out.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def _non_empty(group_id: str, what: str, code: int, message: str | None) -> BaseException:
    if code == Errors.NonEmptyGroupError.errno:
        return Errors.NonEmptyGroupError(
            f"cannot {what} of share group {group_id!r}: the group has active members; stop them "
            "(or wait for them to leave) and try again")
    return _error(code, message, f"{what} of share group {group_id!r} failed")


class ShareGroupAdmin:
    """Share-group and group-config methods of ``KafkaAdminClient``."""

    # provided by KafkaAdminClient
    _call: Callable[..., dict]
    _deadline: Callable[[int | None], int]
    _left: Callable[[int], int]
    _bootstrap: Callable[[int], None]
    _refresh: Callable[[int], None]
    _any_node: Callable[[int], int]
    _negotiated: Callable[..., int | None]
    _with_retries: Callable[..., Any]
    _find_coordinator: Callable[..., Any]
    _metadata: Any

    # ------------------------------------------------------------------ describe / list
    def describe_share_groups(self, group_ids: Iterable[str], include_authorized_operations: bool = False,
                              timeout_ms: int | None = None) -> list[ShareGroupDescription]:
        """One ShareGroupDescription per group, in the order given. A group that does not
        exist raises GroupIdNotFoundError; a group that is not a share group raises
        GroupIdNotFoundError too (the broker's answer), naming the group."""
        deadline = self._deadline(timeout_ms)
        out = []
        for gid in group_ids:
            node = self._find_coordinator(gid, deadline)
            body = {"group_ids": [gid], "include_authorized_operations": bool(include_authorized_operations)}

            def attempt(node: Any = node, body: dict = body, gid: str = gid) -> dict:
                response = self._call(node, SHARE_GROUP_DESCRIBE, body, deadline)
                for g in response.get("groups") or []:
                    code = g.get("error_code", 0)
                    if code:
                        raise _error(code, g.get("error_message"), f"describing share group {gid!r}")
                    return g
                raise Errors.KafkaError(f"describing share group {gid!r}: the broker's answer named no group")

            g = self._with_retries(deadline, attempt)
            members = [ShareMemberDescription(
                m["member_id"], m.get("client_id") or "", m.get("client_host") or "", m.get("rack_id"),
                m.get("member_epoch", -1), sorted(m.get("subscribed_topic_names") or []),
                sorted(TopicPartition(t["topic_name"], p)
                       for t in ((m.get("assignment") or {}).get("topic_partitions") or [])
                       for p in t.get("partitions") or []))
                for m in g.get("members") or []]
            ops = g.get("authorized_operations")
            out.append(ShareGroupDescription(
                g["group_id"], g.get("group_state") or "", g.get("group_epoch", -1), g.get("assignment_epoch", -1),
                g.get("assignor_name") or "", members, node.node_id if hasattr(node, "node_id") else int(node),
                None if ops is None or ops == -2147483648 else ops))
        return out

    def list_share_groups(self, timeout_ms: int | None = None) -> list[ShareGroupListing]:
        """Every share group of the cluster (asking each broker), sorted by id."""
        deadline = self._deadline(timeout_ms)
        self._bootstrap(deadline)
        if not self._metadata.cluster.nodes() or self._metadata.cluster.is_bootstrap:
            self._refresh(deadline)
        seen: dict[str, str] = {}
        for n in self._metadata.cluster.nodes():
            node = n.node_id
            version = self._negotiated(node, LIST_GROUPS, deadline)
            if version is None or version < _LIST_GROUPS_TYPES_VERSION:
                raise Errors.UnsupportedVersionError(
                    f"listing share groups needs ListGroups v{_LIST_GROUPS_TYPES_VERSION} (Apache Kafka 4.0 or "
                    f"later); broker {node} offers {version}")
            response = self._with_retries(
                deadline, lambda node=node: self._call(node, LIST_GROUPS, _LIST_SHARE_GROUPS, deadline))
            code = response.get("error_code", 0)
            if code:
                raise _error(code, None, f"listing groups on broker {node}")
            for g in response.get("groups") or []:
                if (g.get("group_type") or "share").lower() == "share":
                    seen[g["group_id"]] = g.get("group_state") or ""
        return [ShareGroupListing(gid, state) for gid, state in sorted(seen.items())]

    # ------------------------------------------------------------------ offsets
    def list_share_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None,
                                 timeout_ms: int | None = None) -> dict[TopicPartition, SharePartitionOffsetInfo]:
        """The start offset and lag of each share partition of the group (every partition it
        has state for, or the given ones; a given partition without state is left out)."""
        deadline = self._deadline(timeout_ms)
        topics = None
        if partitions is not None:
            topics = [{"topic_name": t, "partitions": ps} for t, ps in _by_topic(partitions).items()]
        body = {"groups": [{"group_id": group_id, "topics": topics}]}
        node = self._find_coordinator(group_id, deadline)

        def attempt() -> dict[TopicPartition, SharePartitionOffsetInfo]:
            response = self._call(node, DESCRIBE_SHARE_GROUP_OFFSETS, body, deadline)
            out: dict[TopicPartition, SharePartitionOffsetInfo] = {}
            for g in response.get("groups") or []:
                if g.get("error_code", 0):
                    raise _error(g["error_code"], g.get("error_message"),
                                 f"reading the offsets of share group {group_id!r}")
                for t in g.get("topics") or []:
                    for p in t.get("partitions") or []:
                        tp = TopicPartition(t["topic_name"], p["partition_index"])
                        if p.get("error_code", 0):
                            raise _error(p["error_code"], p.get("error_message"),
                                         f"reading the offset of share group {group_id!r} on {tp.topic}-{tp.partition}")
                        if p["start_offset"] < 0:
                            continue
                        epoch, lag = p.get("leader_epoch", -1), p.get("lag", -1)
                        out[tp] = SharePartitionOffsetInfo(p["start_offset"], None if epoch is None or epoch < 0
                                                           else epoch, None if lag is None or lag < 0 else lag)
            return out

        return self._with_retries(deadline, attempt)

    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int],
                                  timeout_ms: int | None = None) -> dict[TopicPartition, BaseException | None]:
        """Set the start offset of share partitions of an empty group: records before it are
        never delivered, records from it on are delivered again. A group with members raises
        NonEmptyGroupError; a partition's own error raises it (the first, naming the partition)."""
        wanted: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise Errors.IllegalArgumentError(
                    f"alter_share_group_offsets: the offset for {tp.topic}-{tp.partition} must be an int >= 0, "
                    f"got {offset!r}")
            wanted[tp] = offset
        if not wanted:
            return {}
        deadline = self._deadline(timeout_ms)
        body = {"group_id": group_id, "topics": [
            {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": wanted[TopicPartition(t, p)]}
                                             for p in ps]} for t, ps in _by_topic(wanted).items()]}
        node = self._find_coordinator(group_id, deadline)

        def attempt() -> dict[TopicPartition, BaseException | None]:
            response = self._call(node, ALTER_SHARE_GROUP_OFFSETS, body, deadline)
            code = response.get("error_code", 0)
            if code:
                raise _non_empty(group_id, "alter the offsets", code, response.get("error_message"))
            out: dict[TopicPartition, BaseException | None] = {}
            for t in response.get("responses") or []:
                for p in t.get("partitions") or []:
                    tp = TopicPartition(t["topic_name"], p["partition_index"])
                    pc = p.get("error_code", 0)
                    if pc and (Errors.error_class(pc).retriable or pc == Errors.NotCoordinatorError.errno):
                        raise Errors.error_class(pc)(f"altering the offset of {tp.topic}-{tp.partition}")
                    out[tp] = None if not pc else _non_empty(
                        group_id, f"alter the offset of {tp.topic}-{tp.partition}", pc, p.get("error_message"))
            return out

        results = self._with_retries(deadline, attempt)
        for tp in sorted(results):
            if results[tp] is not None:
                raise results[tp]
        return results

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str],
                                   timeout_ms: int | None = None) -> dict[str, BaseException | None]:
        """Forget the share-partition state of an empty group for whole topics (the group
        starts them afresh, by ``share.auto.offset.reset``, on its next fetch). A group with
        members raises NonEmptyGroupError; a topic's own error raises it."""
        if isinstance(topics, str):
            raise TypeError("delete_share_group_offsets() takes a list of topic names, not a string")
        names = sorted(set(topics))
        if not names:
            return {}
        deadline = self._deadline(timeout_ms)
        body = {"group_id": group_id, "topics": [{"topic_name": t} for t in names]}
        node = self._find_coordinator(group_id, deadline)

        def attempt() -> dict[str, BaseException | None]:
            response = self._call(node, DELETE_SHARE_GROUP_OFFSETS, body, deadline)
            code = response.get("error_code", 0)
            if code:
                raise _non_empty(group_id, "delete the offsets", code, response.get("error_message"))
            return {t["topic_name"]: None if not t.get("error_code", 0) else _error(
                t["error_code"], t.get("error_message"),
                f"deleting the offsets of share group {group_id!r} on topic {t['topic_name']!r}")
                for t in response.get("responses") or []}

        results = self._with_retries(deadline, attempt)
        for name in sorted(results):
            if results[name] is not None:
                raise results[name]
        return results

    # ------------------------------------------------------------------ delete
    def delete_share_groups(self, group_ids: Iterable[str], timeout_ms: int | None = None,
                            raise_errors: bool = True) -> dict[str, BaseException | None]:
        """Delete share groups (each must be empty): ``{group_id: None or the error}``; with
        raise_errors (default) the first error is raised."""
        if isinstance(group_ids, str):
            raise TypeError("delete_share_groups() takes a list of group ids, not a string")
        deadline = self._deadline(timeout_ms)
        results: dict[str, BaseException | None] = {}
        for gid in group_ids:
            node = self._find_coordinator(gid, deadline)

            def attempt(node: Any = node, gid: str = gid) -> BaseException | None:
                response = self._call(node, DELETE_GROUPS, {"groups_names": [gid]}, deadline)
                for r in response.get("results") or []:
                    if r["group_id"] != gid:
                        continue
                    code = r.get("error_code", 0)
                    if not code:
                        return None
                    cls = Errors.error_class(code)
                    if cls.retriable or code == Errors.NotCoordinatorError.errno:
                        raise cls(f"deleting share group {gid!r}")
                    return _non_empty(gid, "delete", code, None) if code == Errors.NonEmptyGroupError.errno \
                        else cls(f"deleting share group {gid!r} failed ({cls.__name__})")
                return Errors.KafkaError(f"deleting share group {gid!r}: the broker's answer did not name it")

            results[gid] = self._with_retries(deadline, attempt)
        if raise_errors:
            for err in results.values():
                if err is not None:
                    raise err
        return results

    # ------------------------------------------------------------------ group configs
    def alter_group_configs(self, group_id: str, configs: Mapping[str, Any], validate_only: bool = False,
                            timeout_ms: int | None = None) -> None:
        """Set group configs (``{"share.record.lock.duration.ms": 15000, ...}``); a value of
        None deletes the override (the broker's default applies again). The broker applies
        them a moment after the call returns."""
        if not configs:
            return
        deadline = self._deadline(timeout_ms)
        entries = [{"name": name, "config_operation": _DELETE if value is None else _SET,
                    "value": None if value is None else _config_text(value)} for name, value in configs.items()]
        body = {"resources": [{"resource_type": GROUP_RESOURCE_TYPE, "resource_name": group_id,
                               "configs": entries}], "validate_only": bool(validate_only)}
        self._bootstrap(deadline)

        def attempt() -> None:
            response = self._call(self._any_node(deadline), INCREMENTAL_ALTER_CONFIGS, body, deadline)
            for r in response.get("responses") or []:
                if r.get("error_code", 0):
                    raise _error(r["error_code"], r.get("error_message"),
                                 f"altering the configs of group {group_id!r}")

        self._with_retries(deadline, attempt)

    def describe_group_configs(self, group_id: str, config_names: Iterable[str] | None = None,
                               timeout_ms: int | None = None) -> dict[str, ConfigEntry]:
        """The group's configs (all, or the named ones): ``{name: ConfigEntry}``; ``source`` is
        GROUP_CONFIG for a value set on the group, DEFAULT_CONFIG or a broker source otherwise."""
        deadline = self._deadline(timeout_ms)
        body = {"resources": [{"resource_type": GROUP_RESOURCE_TYPE, "resource_name": group_id,
                               "configuration_keys": None if config_names is None else list(config_names)}],
                "include_synonyms": True, "include_documentation": False}
        self._bootstrap(deadline)

        def attempt() -> dict[str, ConfigEntry]:
            response = self._call(self._any_node(deadline), DESCRIBE_CONFIGS, body, deadline)
            out: dict[str, ConfigEntry] = {}
            for r in response.get("results") or []:
                if r.get("error_code", 0):
                    raise _error(r["error_code"], r.get("error_message"),
                                 f"describing the configs of group {group_id!r}")
                for c in r.get("configs") or []:
                    source = _CONFIG_SOURCES.get(c.get("config_source", -1), "UNKNOWN")
                    out[c["name"]] = ConfigEntry(
                        c["name"], c.get("value"), source,
                        bool(c.get("is_default")) or source == "DEFAULT_CONFIG", bool(c.get("read_only")),
                        bool(c.get("is_sensitive")),
                        [(s["name"], s.get("value"), _CONFIG_SOURCES.get(s.get("source", -1), "UNKNOWN"))
                         for s in c.get("synonyms") or []])
            return out

        return self._with_retries(deadline, attempt)


def _config_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

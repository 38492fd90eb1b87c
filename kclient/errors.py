"""One exception hierarchy for kclient and kcore.

The errors kcore itself raises (KafkaError, the protocol and record-batch errors, connection
loss, bad arguments and settings) are defined in ``kcore.errors`` and re-exported here as the
very same classes, so ``except kclient.errors.X`` catches what kcore raises.
Broker error codes (Kafka protocol, "Error Codes" table) each get a class generated from
``_BROKER_ERRORS`` with ``errno``, ``retriable`` and a description that says what to do.
The remaining client-side failures (timeouts, misuse, group membership) are written below.
"""
from __future__ import annotations

from kcore.errors import (  # noqa: F401  (re-exported)
    BufferUnderflowError,
    ConfigurationError,
    CorrelationIdMismatchError,
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    DecompressionLimitError,
    FrameTooLargeError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidLengthError,
    InvalidRecordLengthError,
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    RecordVarintError,
    UnsupportedCodecError,
    UnsupportedVersionError,
    VarintError,
)

__all__ = ["KafkaError", "BrokerResponseError", "for_code", "raise_for_code"]


# --------------------------------------------------------------------------- client side
class KafkaTimeoutError(KafkaError):
    """An operation did not complete within its timeout."""
    retriable = True


class NodeNotReadyError(KafkaError):
    retriable = True


class NoBrokersAvailable(KafkaError):
    """None of the bootstrap servers could be reached."""


class ConcurrentAccessError(IllegalStateError):
    """A second thread entered the consumer while another thread was using it."""


class WakeupError(KafkaError):
    """A blocking call was interrupted by ``wakeup()``."""


class InterruptError(KafkaError):
    """A blocking call was interrupted."""


class CommitFailedError(KafkaError):
    description = (
        "Commit cannot be completed since the group has already rebalanced and assigned the "
        "partitions to another member. The time between poll() calls was probably longer than "
        "max.poll.interval.ms; raise it or lower max.poll.records."
    )


class UnjoinedGroupError(KafkaError):
    """A JoinGroup/SyncGroup answer arrived after the member left that rebalance (the
    coordinator rejoins at once; not raised to the application)."""
    retriable = True


class RetriableCommitFailedError(KafkaError):
    """An asynchronous offset commit failed with a retriable error (coordinator moved or
    unavailable, connection lost); a later commit of newer offsets may succeed."""
    retriable = True


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and auto.offset.reset is 'none'."""


class RequestCancelledError(KafkaError):
    """The request was cancelled (connection closed or client shut down) before it completed."""
    retriable = True


class DataLossError(KafkaError):
    """Records expected in an offset range are no longer on the broker (retention, deletion)."""


class BrokerResponseError(KafkaError):
    """Base of the errors a broker returns as error codes."""


# --------------------------------------------------------------------------- broker codes
# (code, NAME, retriable, invalid_metadata, description) from the Kafka protocol's error table.
_BROKER_ERRORS = [
    (-1, "UNKNOWN_SERVER_ERROR", False, False, "The server experienced an unexpected error when processing the request."),
    (1, "OFFSET_OUT_OF_RANGE", False, False, "The requested offset is not within the range of offsets maintained by the server."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, True, "This server does not host this topic-partition; refresh metadata."),
    (4, "INVALID_FETCH_SIZE", False, False, "The requested fetch size is invalid."),
    (5, "LEADER_NOT_AVAILABLE", True, True, "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    (6, "NOT_LEADER_OR_FOLLOWER", True, True, "For requests intended only for the leader, this error indicates that the broker is not the current leader."),
    (7, "REQUEST_TIMED_OUT", True, False, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", False, False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, True, "The replica is not available for the requested topic-partition."),
    (10, "MESSAGE_TOO_LARGE", False, False, "The request included a message larger than the max message size the server will accept."),
    (11, "STALE_CONTROLLER_EPOCH", False, False, "The controller moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, False, "The metadata field of the offset request was too large."),
    (13, "NETWORK_EXCEPTION", True, True, "The server disconnected before a response was received."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, False, "The coordinator is loading and hence can't process requests."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, False, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", True, False, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", False, False, "The request attempted to perform an operation on an invalid topic."),
    (18, "RECORD_LIST_TOO_LARGE", False, False, "The request included message batch larger than the configured segment size on the server."),
    (19, "NOT_ENOUGH_REPLICAS", True, False, "Messages are rejected since there are fewer in-sync replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, False, "Messages are written to the log, but to fewer in-sync replicas than required."),
    (21, "INVALID_REQUIRED_ACKS", False, False, "Produce request specified an invalid value for required acks."),
    (22, "ILLEGAL_GENERATION", False, False, "Specified group generation id is not valid; the member must rejoin."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, False, "The group member's supported protocols are incompatible with those of existing members."),
    (24, "INVALID_GROUP_ID", False, False, "The configured groupId is invalid."),
    (25, "UNKNOWN_MEMBER_ID", False, False, "The coordinator is not aware of this member; it must rejoin."),
    (26, "INVALID_SESSION_TIMEOUT", False, False, "The session timeout is not within the range allowed by the broker (group.min.session.timeout.ms and group.max.session.timeout.ms)."),
    (27, "REBALANCE_IN_PROGRESS", False, False, "The group is rebalancing, so a rejoin is needed."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, False, "The committing offset data size is not valid."),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, False, "Topic authorization failed."),
    (30, "GROUP_AUTHORIZATION_FAILED", False, False, "Group authorization failed."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, False, "Cluster authorization failed."),
    (32, "INVALID_TIMESTAMP", False, False, "The timestamp of the message is out of acceptable range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, False, "The broker does not support the requested SASL mechanism."),
    (34, "ILLEGAL_SASL_STATE", False, False, "Request is not valid given the current SASL state."),
    (36, "TOPIC_ALREADY_EXISTS", False, False, "Topic with this name already exists."),
    (37, "INVALID_PARTITIONS", False, False, "Number of partitions is below 1."),
    (38, "INVALID_REPLICATION_FACTOR", False, False, "Replication factor is below 1 or larger than the number of available brokers."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, False, "Replica assignment is invalid."),
    (40, "INVALID_CONFIG", False, False, "Configuration is invalid."),
    (41, "NOT_CONTROLLER", True, False, "This is not the correct controller for this cluster."),
    (42, "INVALID_REQUEST", False, False, "The request was malformed or sent to an incompatible broker; see the broker logs."),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False, False, "The message format version on the broker does not support the request."),
    (44, "POLICY_VIOLATION", False, False, "Request parameters do not satisfy the configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, False, "The broker received an out of order sequence number."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, False, "The broker received a duplicate sequence number."),
    (47, "INVALID_PRODUCER_EPOCH", False, False, "Producer attempted to produce with an old epoch."),
    (48, "INVALID_TXN_STATE", False, False, "The producer attempted a transactional operation in an invalid state."),
    (49, "INVALID_PRODUCER_ID_MAPPING", False, False, "The producer attempted to use a producer id which is not currently assigned to its transactional id."),
    (50, "INVALID_TRANSACTION_TIMEOUT", False, False, "The transaction timeout is larger than the maximum value allowed by the broker."),
    (51, "CONCURRENT_TRANSACTIONS", True, False, "Another concurrent operation on the same transaction was ongoing."),
    (52, "TRANSACTION_COORDINATOR_FENCED", False, False, "The transaction coordinator sending a WriteTxnMarker is no longer the current coordinator."),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, False, "Transactional Id authorization failed."),
    (54, "SECURITY_DISABLED", False, False, "Security features are disabled."),
    (55, "OPERATION_NOT_ATTEMPTED", False, False, "The broker did not attempt to execute this operation."),
    (56, "KAFKA_STORAGE_ERROR", True, True, "Disk error when trying to access log file on the disk."),
    (57, "LOG_DIR_NOT_FOUND", False, False, "The user-specified log directory is not found in the broker config."),
    (58, "SASL_AUTHENTICATION_FAILED", False, False, "SASL Authentication failed."),
    (59, "UNKNOWN_PRODUCER_ID", False, False, "The broker could not locate the producer metadata associated with the producer id."),
    (60, "REASSIGNMENT_IN_PROGRESS", False, False, "A partition reassignment is in progress."),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, False, "Delegation Token feature is not enabled."),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, False, "Delegation Token is not found on server."),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False, False, "Specified Principal is not valid Owner/Renewer."),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False, False, "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels."),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, False, "Delegation Token authorization failed."),
    (66, "DELEGATION_TOKEN_EXPIRED", False, False, "Delegation Token is expired."),
    (67, "INVALID_PRINCIPAL_TYPE", False, False, "Supplied principalType is not supported."),
    (68, "NON_EMPTY_GROUP", False, False, "The group is not empty."),
    (69, "GROUP_ID_NOT_FOUND", False, False, "The group id does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, False, "The fetch session ID was not found."),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, False, "The fetch session epoch is invalid."),
    (72, "LISTENER_NOT_FOUND", True, True, "There is no listener on the leader broker that matches the listener on which metadata request was processed."),
    (73, "TOPIC_DELETION_DISABLED", False, False, "Topic deletion is disabled."),
    (74, "FENCED_LEADER_EPOCH", True, True, "The leader epoch in the request is older than the epoch on the broker."),
    (75, "UNKNOWN_LEADER_EPOCH", True, True, "The leader epoch in the request is newer than the epoch on the broker."),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False, False, "The requesting client does not support the compression type of given partition."),
    (77, "STALE_BROKER_EPOCH", False, False, "Broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", True, False, "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing."),
    (79, "MEMBER_ID_REQUIRED", False, False, "The group member needs to have a valid member id before actually entering a consumer group."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, True, "The preferred leader was not available."),
    (81, "GROUP_MAX_SIZE_REACHED", False, False, "The consumer group has reached its max size."),
    (82, "FENCED_INSTANCE_ID", False, False, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, True, "Eligible topic partition leaders are not available."),
    (84, "ELECTION_NOT_NEEDED", True, True, "Leader election not needed for topic partition."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, False, "No partition reassignment is in progress."),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False, False, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (87, "INVALID_RECORD", False, False, "This record has failed the validation on broker and hence will be rejected."),
    (88, "UNSTABLE_OFFSET_COMMIT", True, False, "There are unstable offsets that need to be cleared."),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, False, "The throttling quota has been exceeded."),
    (90, "PRODUCER_FENCED", False, False, "There is a newer producer with the same transactionalId which fences the current one."),
    (91, "RESOURCE_NOT_FOUND", False, False, "A request illegally referred to a resource that does not exist."),
    (92, "DUPLICATE_RESOURCE", False, False, "A request illegally referred to the same resource twice."),
    (93, "UNACCEPTABLE_CREDENTIAL", False, False, "Requested credential would not meet criteria for acceptability."),
    (94, "INCONSISTENT_VOTER_SET", False, False, "Either the sender or recipient of a voter-only request is not one of the expected voters."),
    (95, "INVALID_UPDATE_VERSION", False, False, "The given update version was invalid."),
    (96, "FEATURE_UPDATE_FAILED", False, False, "Unable to update finalized features due to an unexpected server error."),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False, False, "Request principal deserialization failed during forwarding."),
    (98, "SNAPSHOT_NOT_FOUND", False, False, "Requested snapshot was not found."),
    (99, "POSITION_OUT_OF_RANGE", False, False, "Requested position is not greater than or equal to zero, and less than the size of the snapshot."),
    (100, "UNKNOWN_TOPIC_ID", True, True, "This server does not host this topic ID."),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, False, "This broker ID is already in use."),
    (102, "BROKER_ID_NOT_REGISTERED", False, False, "The given broker ID was not registered."),
    (103, "INCONSISTENT_TOPIC_ID", True, True, "The log's topic ID did not match the topic ID in the request."),
    (104, "INCONSISTENT_CLUSTER_ID", False, False, "The clusterId in the request does not match that found on the server."),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, False, "The transactionalId could not be found."),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, False, "The fetch session encountered inconsistent topic ID usage."),
    (107, "INELIGIBLE_REPLICA", False, False, "The new ISR contains at least one ineligible replica."),
    (108, "NEW_LEADER_ELECTED", False, False, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, False, "The requested offset is moved to tiered storage."),
    (110, "FENCED_MEMBER_EPOCH", False, False, "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."),
    (111, "UNRELEASED_INSTANCE_ID", False, False, "The instance ID is still used by another member in the consumer group."),
    (112, "UNSUPPORTED_ASSIGNOR", False, False, "The assignor or its version range is not supported by the consumer group."),
    (113, "STALE_MEMBER_EPOCH", False, False, "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API."),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, False, "The request was sent to an endpoint of the wrong type."),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, False, "This endpoint type is not supported yet."),
    (116, "UNKNOWN_CONTROLLER_ID", False, False, "This controller ID is not known."),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False, False, "Client sent a push telemetry request with an invalid or outdated subscription ID."),
    (118, "TELEMETRY_TOO_LARGE", False, False, "Client sent a push telemetry request larger than the maximum size the broker will accept."),
    (119, "INVALID_REGISTRATION", False, False, "The controller has considered the broker registration to be invalid."),
    (120, "TRANSACTION_ABORTABLE", False, False, "The server encountered an error with the transaction; the client can abort the transaction to continue."),
    (121, "INVALID_RECORD_STATE", False, False, "The record state is invalid; the acknowledgement of delivery could not be completed."),
    (122, "SHARE_SESSION_NOT_FOUND", True, False, "The share session was not found."),
    (123, "INVALID_SHARE_SESSION_EPOCH", True, False, "The share session epoch is invalid."),
    (124, "FENCED_STATE_EPOCH", False, False, "The share coordinator rejected the request because the share-group state epoch did not match."),
    (125, "INVALID_VOTER_KEY", False, False, "The voter key doesn't match the receiving replica's key."),
    (126, "DUPLICATE_VOTER", False, False, "The voter is already part of the set of voters."),
    (127, "VOTER_NOT_FOUND", False, False, "The voter is not part of the set of voters."),
]

_BY_CODE: dict[int, type] = {}


def _class_name(name: str) -> str:
    camel = "".join(part.capitalize() for part in name.split("_"))
    if camel.endswith("Exception"):
        camel = camel[: -len("Exception")]
    return camel + "Error"


def _make_broker_errors() -> None:
    g = globals()
    for code, name, retriable, invalid_md, desc in _BROKER_ERRORS:
        cls_name = _class_name(name)
        cls = type(cls_name, (BrokerResponseError,), {
            "errno": code, "retriable": retriable, "invalid_metadata": invalid_md,
            "description": desc, "name": name, "__doc__": desc, "__module__": __name__,
        })
        g[cls_name] = cls
        __all__.append(cls_name)
        _BY_CODE[code] = cls
    # Codes whose client-side class already exists above.
    _BY_CODE[2] = CorruptRecordError
    _BY_CODE[35] = UnsupportedVersionError


_make_broker_errors()

for _name in list(globals()):
    _obj = globals()[_name]
    if isinstance(_obj, type) and issubclass(_obj, KafkaError) and _name not in __all__:
        __all__.append(_name)


class UnknownBrokerError(BrokerResponseError):
    """The broker returned an error code this client does not know."""
    retriable = True


def for_code(code: int) -> type | None:
    """The exception class for a broker error code; None for 0 (no error)."""
    if code == 0:
        return None
    return _BY_CODE.get(code, UnknownBrokerError)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception for ``code`` unless it is 0."""
    cls = for_code(code)
    if cls is None:
        return
    err = cls(message) if message else cls()
    if cls is UnknownBrokerError:
        err.errno = code
    raise err

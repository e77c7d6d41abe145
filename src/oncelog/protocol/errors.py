"""The error hierarchy.

Every failure the broker reports to a client is an exception raised in the core that carries a
Kafka error code (``kio.schema.errors.ErrorCode``, generated from Kafka's own error table, with
its ``retriable`` flag). Handlers translate exceptions into response error codes at one boundary
(``oncelog.broker.network.dispatch``); nothing else turns exceptions into codes.

Messages name the ids involved and state expected and actual values, for example
``"producer 4001 epoch 3: sequence 17 received, 12 expected"``.

An exception that is *not* a ``KafkaError`` escaping a handler is a bug: the dispatcher logs it
with its traceback and answers UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_for"]


class KafkaError(Exception):
    """Base class: an error that has a Kafka error code.

    Subclasses set ``code``; ``retriable`` comes from Kafka's own table.
    """

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code.name)

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self})"


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {}


def _define(name: str, code: ErrorCode) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {"code": code, "__doc__": f"Kafka error {code.name} ({int(code)})."})
    _BY_CODE[code] = cls
    return cls


def error_for(code: ErrorCode, message: str = "") -> KafkaError:
    """An exception instance for ``code`` (the specific subclass where one is defined)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _define("KafkaError_" + code.name, code)
    return cls(message)


# The errors the core raises by name. Defined explicitly so they can be imported and caught.
UnknownServerError = _define("UnknownServerError", ErrorCode.unknown_server_error)
OffsetOutOfRange = _define("OffsetOutOfRange", ErrorCode.offset_out_of_range)
CorruptMessage = _define("CorruptMessage", ErrorCode.corrupt_message)
UnknownTopicOrPartition = _define("UnknownTopicOrPartition", ErrorCode.unknown_topic_or_partition)
InvalidFetchSize = _define("InvalidFetchSize", ErrorCode.invalid_fetch_size)
NotLeaderOrFollower = _define("NotLeaderOrFollower", ErrorCode.not_leader_or_follower)
RequestTimedOut = _define("RequestTimedOut", ErrorCode.request_timed_out)
MessageTooLarge = _define("MessageTooLarge", ErrorCode.message_too_large)
CoordinatorLoadInProgress = _define("CoordinatorLoadInProgress", ErrorCode.coordinator_load_in_progress)
CoordinatorNotAvailable = _define("CoordinatorNotAvailable", ErrorCode.coordinator_not_available)
NotCoordinator = _define("NotCoordinator", ErrorCode.not_coordinator)
InvalidTopic = _define("InvalidTopic", ErrorCode.invalid_topic_exception)
RecordListTooLarge = _define("RecordListTooLarge", ErrorCode.record_list_too_large)
NotEnoughReplicas = _define("NotEnoughReplicas", ErrorCode.not_enough_replicas)
InvalidRequiredAcks = _define("InvalidRequiredAcks", ErrorCode.invalid_required_acks)
IllegalGeneration = _define("IllegalGeneration", ErrorCode.illegal_generation)
InconsistentGroupProtocol = _define("InconsistentGroupProtocol", ErrorCode.inconsistent_group_protocol)
InvalidGroupId = _define("InvalidGroupId", ErrorCode.invalid_group_id)
UnknownMemberId = _define("UnknownMemberId", ErrorCode.unknown_member_id)
InvalidSessionTimeout = _define("InvalidSessionTimeout", ErrorCode.invalid_session_timeout)
RebalanceInProgress = _define("RebalanceInProgress", ErrorCode.rebalance_in_progress)
InvalidCommitOffsetSize = _define("InvalidCommitOffsetSize", ErrorCode.invalid_commit_offset_size)
UnsupportedVersion = _define("UnsupportedVersion", ErrorCode.unsupported_version)
TopicAlreadyExists = _define("TopicAlreadyExists", ErrorCode.topic_already_exists)
InvalidPartitions = _define("InvalidPartitions", ErrorCode.invalid_partitions)
InvalidReplicationFactor = _define("InvalidReplicationFactor", ErrorCode.invalid_replication_factor)
InvalidRequest = _define("InvalidRequest", ErrorCode.invalid_request)
UnsupportedForMessageFormat = _define("UnsupportedForMessageFormat", ErrorCode.unsupported_for_message_format)
InvalidConfig = _define("InvalidConfig", ErrorCode.invalid_config)
OutOfOrderSequenceNumber = _define("OutOfOrderSequenceNumber", ErrorCode.out_of_order_sequence_number)
DuplicateSequenceNumber = _define("DuplicateSequenceNumber", ErrorCode.duplicate_sequence_number)
InvalidProducerEpoch = _define("InvalidProducerEpoch", ErrorCode.invalid_producer_epoch)
InvalidTxnState = _define("InvalidTxnState", ErrorCode.invalid_txn_state)
TransactionalIdAuthorizationFailed = _define(
    "TransactionalIdAuthorizationFailed", ErrorCode.transactional_id_authorization_failed
)
InvalidProducerIdMapping = _define("InvalidProducerIdMapping", ErrorCode.invalid_producer_id_mapping)
InvalidTransactionTimeout = _define("InvalidTransactionTimeout", ErrorCode.invalid_transaction_timeout)
ConcurrentTransactions = _define("ConcurrentTransactions", ErrorCode.concurrent_transactions)
TransactionCoordinatorFenced = _define("TransactionCoordinatorFenced", ErrorCode.transaction_coordinator_fenced)
InvalidTimestamp = _define("InvalidTimestamp", ErrorCode.invalid_timestamp)
KafkaStorageError = _define("KafkaStorageError", ErrorCode.kafka_storage_error)
UnknownProducerId = _define("UnknownProducerId", ErrorCode.unknown_producer_id)
GroupIdNotFound = _define("GroupIdNotFound", ErrorCode.group_id_not_found)
NonEmptyGroup = _define("NonEmptyGroup", ErrorCode.non_empty_group)
MemberIdRequired = _define("MemberIdRequired", ErrorCode.member_id_required)
FencedInstanceId = _define("FencedInstanceId", ErrorCode.fenced_instance_id)
GroupMaxSizeReached = _define("GroupMaxSizeReached", ErrorCode.group_max_size_reached)
GroupSubscribedToTopic = _define("GroupSubscribedToTopic", ErrorCode.group_subscribed_to_topic)
InvalidRecord = _define("InvalidRecord", ErrorCode.invalid_record)
UnstableOffsetCommit = _define("UnstableOffsetCommit", ErrorCode.unstable_offset_commit)
ProducerFenced = _define("ProducerFenced", ErrorCode.producer_fenced)
TransactionalIdNotFound = _define("TransactionalIdNotFound", ErrorCode.transactional_id_not_found)
TopicDeletionDisabled = _define("TopicDeletionDisabled", ErrorCode.topic_deletion_disabled)
UnknownTopicId = _define("UnknownTopicId", ErrorCode.unknown_topic_id)
# the consumer rebalance protocol (KIP-848, issue 30)
FencedMemberEpoch = _define("FencedMemberEpoch", ErrorCode.fenced_member_epoch)
StaleMemberEpoch = _define("StaleMemberEpoch", ErrorCode.stale_member_epoch)
UnsupportedAssignor = _define("UnsupportedAssignor", ErrorCode.unsupported_assignor)
InvalidRegularExpression = _define("InvalidRegularExpression", ErrorCode.invalid_regular_expression)
UnreleasedInstanceId = _define("UnreleasedInstanceId", ErrorCode.unreleased_instance_id)
PolicyViolation = _define("PolicyViolation", ErrorCode.policy_violation)
OffsetMetadataTooLarge = _define("OffsetMetadataTooLarge", ErrorCode.offset_metadata_too_large)
FencedLeaderEpoch = _define("FencedLeaderEpoch", ErrorCode.fenced_leader_epoch)
UnknownLeaderEpoch = _define("UnknownLeaderEpoch", ErrorCode.unknown_leader_epoch)
# issue 18: authorization
TopicAuthorizationFailed = _define("TopicAuthorizationFailed", ErrorCode.topic_authorization_failed)
GroupAuthorizationFailed = _define("GroupAuthorizationFailed", ErrorCode.group_authorization_failed)
ClusterAuthorizationFailed = _define("ClusterAuthorizationFailed", ErrorCode.cluster_authorization_failed)
TransactionalIdAuthorizationFailed = _define("TransactionalIdAuthorizationFailed",
                                             ErrorCode.transactional_id_authorization_failed)
SecurityDisabled = _define("SecurityDisabled", ErrorCode.security_disabled)
# share groups (KIP-932, issue 30)
InvalidRecordState = _define("InvalidRecordState", ErrorCode.invalid_record_state)
ShareSessionNotFound = _define("ShareSessionNotFound", ErrorCode.share_session_not_found)
InvalidShareSessionEpoch = _define("InvalidShareSessionEpoch", ErrorCode.invalid_share_session_epoch)
ShareSessionLimitReached = _define("ShareSessionLimitReached", ErrorCode.share_session_limit_reached)

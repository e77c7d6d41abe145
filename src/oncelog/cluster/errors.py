"""The cluster's storage errors, each a KafkaError with the code a client acts on.

``LeaderFenced`` (NOT_LEADER_OR_FOLLOWER, retriable: the client refreshes metadata and goes to
the new leader): the partition's leader epoch in the store is not the writer's; nothing was
written. ``StoreUnavailable`` (KAFKA_STORAGE_ERROR, retriable): PostgreSQL could not be reached
or the transaction failed; nothing was acknowledged, and when ``outcome_unknown`` the batch may
or may not be in the store (the connection broke during COMMIT), so the leader must re-read the
log end before it appends again. ``LogEndMoved`` (KAFKA_STORAGE_ERROR, retriable): the batch was
given offsets from a log end the store no longer has (an earlier append of the same partition
failed); nothing was written.

Membership (membership.py): ``DuplicateBrokerRegistration`` (a live session holds the node id),
``BrokerSessionExpired`` (STALE_BROKER_EPOCH: stop leading, register again),
``BrokerNotRegistered`` (BROKER_ID_NOT_REGISTERED).
"""

from __future__ import annotations

from oncelog.protocol.errors import ErrorCode, KafkaError, KafkaStorageError, NotLeaderOrFollower

__all__ = ["BrokerNotRegistered", "BrokerSessionExpired", "DuplicateBrokerRegistration", "LeaderFenced", "LogEndMoved",
           "StoreUnavailable"]


class LeaderFenced(NotLeaderOrFollower):
    def __init__(self, what: str, epoch: int, store_epoch: int, store_leader: int) -> None:
        super().__init__(f"{what}: leader epoch {epoch} is fenced; the store has epoch {store_epoch} "
                         f"(leader broker {store_leader})")
        self.epoch = epoch
        self.store_epoch = store_epoch
        self.store_leader = store_leader


class StoreUnavailable(KafkaStorageError):
    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class LogEndMoved(KafkaStorageError):
    def __init__(self, what: str, expected: int, actual: int) -> None:
        super().__init__(f"{what}: batch assigned offset {expected}, but the stored log end is {actual}")
        self.expected = expected
        self.actual = actual


class DuplicateBrokerRegistration(KafkaError):
    """DUPLICATE_BROKER_REGISTRATION: another broker process holds this node id's live session."""

    code = ErrorCode.duplicate_broker_registration


class BrokerSessionExpired(KafkaError):
    """STALE_BROKER_EPOCH: this broker's session has ended (expired, deregistered or replaced by a
    newer registration). The broker must stop acting as leader of anything and register again;
    the store already refuses its appends once a rebalance has moved its partitions."""

    code = ErrorCode.stale_broker_epoch


class BrokerNotRegistered(KafkaError):
    """BROKER_ID_NOT_REGISTERED: a heartbeat or deregistration before registration (a bug in the
    caller) or for a node id the store does not know."""

    code = ErrorCode.broker_id_not_registered

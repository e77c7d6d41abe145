"""The neutral request and result types of the group coordinator core.

The core never sees kio messages: handlers translate a request of any version into these, and
the core's answers back into that version's response. Whole-request failures are raised as
``KafkaError``; per-item failures are ``KafkaError`` instances in the result (never codes).

A request whose answer is not known yet (a JoinGroup waiting for the other members, a SyncGroup
waiting for the leader's assignment) gets ``Parked(reply_id)``; the answer comes later through
the core's outbox as ``(reply_id, payload)``, where ``payload`` is a result or a ``KafkaError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.consumer_group import ConsumerSettings
from oncelog.protocol.errors import InvalidGroupId

#: A record for ``__consumer_offsets``: key and value (None: a tombstone).
Record = tuple[rec.Key, rec.Value | None]


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Coordinator settings (Kafka broker property names in the comments)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    new_member_join_timeout_ms: int = 300_000  # Kafka's fixed NewMemberJoinTimeoutMs
    max_metadata_bytes: int = 4_096  # offset.metadata.max.bytes
    max_group_size: int = 0x7FFFFFFF  # group.max.size
    #: the group.consumer.* configs of the consumer rebalance protocol (KIP-848)
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)


@dataclass(frozen=True, slots=True)
class Parked:
    """The answer will come through the outbox under ``reply_id``."""

    reply_id: int


@dataclass(slots=True)
class Result:
    """What a core operation wants done: append ``records`` (one batch; transactional for
    ``producer`` = (producer id, epoch)), replay them, then answer ``response``."""

    records: list[Record] = field(default_factory=list)
    response: Any = None
    producer: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool  # JoinGroup v4+ without an instance id (KIP-394)


@dataclass(frozen=True, slots=True)
class JoinResult:
    member_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (id, instance id, metadata): leader only


@dataclass(frozen=True, slots=True)
class SyncResult:
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class OffsetCommitData:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberSummary, ...]


#: The longest group id, in UTF-8 bytes: Kafka's protocol strings (and the group id in every
#: ``__consumer_offsets`` key) carry an int16 length. Kafka itself sets no other limit (its
#: GroupCoordinator refuses only a null id, and an empty one outside OffsetCommit, OffsetFetch,
#: DescribeGroups and DeleteGroups); a longer id can only come in a flexible-version request,
#: whose compact strings Kafka's parser refuses past this length too.
MAX_GROUP_ID_BYTES = 0x7FFF


def validate_group_id(group_id: str | None, *, allow_empty: bool = False) -> str:
    """Raises InvalidGroupId for a null, empty (unless ``allow_empty``: Kafka accepts the empty
    group id in OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups) or unstorable id
    (over ``MAX_GROUP_ID_BYTES``); any other id is accepted, as Kafka accepts it (issue 26 row 13:
    ids over 255 characters used to be refused)."""
    if group_id is None or (not group_id and not allow_empty):
        raise InvalidGroupId(f"group id {group_id!r} is not valid: it must not be empty")
    if len(group_id) > MAX_GROUP_ID_BYTES // 4 and len(group_id.encode("utf-8", "surrogatepass")) > MAX_GROUP_ID_BYTES:
        raise InvalidGroupId(f"a group id of {len(group_id)} characters is longer than a Kafka string "
                             f"({MAX_GROUP_ID_BYTES} bytes)")
    return group_id

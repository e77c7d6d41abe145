"""Shared by the group handlers: request field conversions, and topics named by id (OffsetCommit
v10+, OffsetFetch v10+, KIP-848/KIP-516) resolved to names."""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Sequence

from oncelog.broker.context import BrokerContext, Client
from oncelog.coordinator.group.types import OffsetCommitData
from oncelog.protocol.errors import ErrorCode
from oncelog.types import TopicPartition

if TYPE_CHECKING:  # kio's classes of the versions served (annotations only)
    from oncelog.broker.handlers._acl import Gate
    from kio.schema.offset_commit.v2.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV2
    from kio.schema.offset_commit.v3.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV3
    from kio.schema.offset_commit.v4.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV4
    from kio.schema.offset_commit.v5.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV5
    from kio.schema.offset_commit.v6.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV6
    from kio.schema.offset_commit.v7.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV7
    from kio.schema.offset_commit.v8.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV8
    from kio.schema.offset_commit.v9.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV9
    from kio.schema.offset_commit.v10.request import OffsetCommitRequestTopic as OffsetCommitRequestTopicV10
    OffsetCommitTopic = (
        OffsetCommitRequestTopicV2 | OffsetCommitRequestTopicV3 | OffsetCommitRequestTopicV4 |
        OffsetCommitRequestTopicV5 | OffsetCommitRequestTopicV6 | OffsetCommitRequestTopicV7 |
        OffsetCommitRequestTopicV8 | OffsetCommitRequestTopicV9 | OffsetCommitRequestTopicV10
    )
    from kio.schema.txn_offset_commit.v0.request import TxnOffsetCommitRequestTopic as TxnOffsetCommitRequestTopicV0
    from kio.schema.txn_offset_commit.v1.request import TxnOffsetCommitRequestTopic as TxnOffsetCommitRequestTopicV1
    from kio.schema.txn_offset_commit.v2.request import TxnOffsetCommitRequestTopic as TxnOffsetCommitRequestTopicV2
    from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestTopic as TxnOffsetCommitRequestTopicV3
    from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequestTopic as TxnOffsetCommitRequestTopicV4
    from kio.schema.txn_offset_commit.v5.request import TxnOffsetCommitRequestTopic as TxnOffsetCommitRequestTopicV5
    TxnOffsetCommitTopic = (
        TxnOffsetCommitRequestTopicV0 | TxnOffsetCommitRequestTopicV1 | TxnOffsetCommitRequestTopicV2 |
        TxnOffsetCommitRequestTopicV3 | TxnOffsetCommitRequestTopicV4 | TxnOffsetCommitRequestTopicV5
    )
    from kio.schema.offset_fetch.v1.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV1
    from kio.schema.offset_fetch.v2.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV2
    from kio.schema.offset_fetch.v3.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV3
    from kio.schema.offset_fetch.v4.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV4
    from kio.schema.offset_fetch.v5.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV5
    from kio.schema.offset_fetch.v6.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV6
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic as OffsetFetchRequestTopicV7
    OffsetFetchTopic = (
        OffsetFetchRequestTopicV1 | OffsetFetchRequestTopicV2 | OffsetFetchRequestTopicV3 |
        OffsetFetchRequestTopicV4 | OffsetFetchRequestTopicV5 | OffsetFetchRequestTopicV6 |
        OffsetFetchRequestTopicV7
    )
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequestTopics as OffsetFetchRequestTopicsV8
    from kio.schema.offset_fetch.v9.request import OffsetFetchRequestTopics as OffsetFetchRequestTopicsV9
    from kio.schema.offset_fetch.v10.request import OffsetFetchRequestTopics as OffsetFetchRequestTopicsV10
    OffsetFetchTopics = (
        OffsetFetchRequestTopicsV8 | OffsetFetchRequestTopicsV9 | OffsetFetchRequestTopicsV10
    )
    #: a request topic that names its topic by name or (some versions) by id
    GroupTopic = OffsetCommitTopic | TxnOffsetCommitTopic | OffsetFetchTopic | OffsetFetchTopics

_MS = datetime.timedelta(milliseconds=1)
#: the all-zero topic id (no topic has it; kio reads it from a request as None, writes None as it)
ZERO_ID = uuid.UUID(int=0)


def ms(value: datetime.timedelta | int) -> int:
    """A kio duration field in whole milliseconds (-1 stays -1)."""
    if isinstance(value, datetime.timedelta):
        return round(value / _MS)
    return int(value)


def client_host(client: Client) -> str:
    """The requesting client's address as Kafka shows it ("/127.0.0.1")."""
    return f"/{client.host}" if client.host else ""


def unknown_id_key(topic_id: uuid.UUID) -> str:
    """The stand-in topic name under which a request's unknown topic id is answered: no topic can
    have it (Kafka's topic names are [a-zA-Z0-9._-] only)."""
    return f"<unknown topic id {topic_id}>"


def topic_key(broker: BrokerContext, t: "GroupTopic") -> str:
    """The name of a request topic entity that names its topic by ``name`` or, in the versions
    that have it, by ``topic_id``: an id the broker does not know, the all-zero id among them
    (which kio reads as None), gives ``unknown_id_key``: UNKNOWN_TOPIC_ID, as Kafka answers it."""
    if hasattr(t, "name"):
        return t.name
    topic_id = t.topic_id or ZERO_ID  # kio reads the all-zero id as None
    meta = broker.replicas.topic_by_id(topic_id) if topic_id.int else None
    return meta.name if meta is not None else unknown_id_key(topic_id)


def topic_id_of(broker: BrokerContext, name: str) -> uuid.UUID:
    """The id of topic ``name`` for an answer that names topics by id (the all-zero id when the
    topic is unknown, as Kafka answers an id it cannot resolve)."""
    meta = broker.replicas.topics.get(name)
    return meta.topic_id if meta is not None else uuid.UUID(int=0)


def requested_offsets(broker: BrokerContext, topics: "Sequence[OffsetCommitTopic | TxnOffsetCommitTopic]") -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetCommitData]]:
    """The offsets of an OffsetCommit / TxnOffsetCommit request: (codes already decided, offsets
    to commit), keyed by ``topic_key``. Partitions the broker does not have get
    UNKNOWN_TOPIC_OR_PARTITION; those of a topic id it does not know, UNKNOWN_TOPIC_ID."""
    codes: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetCommitData] = {}
    for t in topics:
        name = topic_key(broker, t)
        for p in t.partitions:
            tp = TopicPartition(name, p.partition_index)
            if name.startswith("<"):
                codes[tp] = ErrorCode.unknown_topic_id
            elif not broker.replicas.exists(tp):
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = OffsetCommitData(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata
                )
    return codes, offsets


def authorize_offsets(g: "Gate", group_id: str, codes: dict[TopicPartition, ErrorCode],
                      offsets: dict[TopicPartition, OffsetCommitData], request_denied: ErrorCode | None = None) -> None:
    """ACLs of OffsetCommit / TxnOffsetCommit (issue 18, acl/rules.py), in Kafka's order: a
    request-wide refusal (``request_denied``: the transactional id), then READ on the group, for
    every partition; then READ on each topic, per partition (before "unknown topic"). Refused
    partitions move from ``offsets`` to ``codes``. ``g``: the request's ``_acl.Gate`` (not None)."""
    every = request_denied or g.denied("group", group_id)
    allowed: dict[str, bool] = {}
    for tp in [*codes, *offsets]:
        if codes.get(tp) == ErrorCode.unknown_topic_id and every is None:
            continue  # an id no topic has: nothing to authorize (as Kafka)
        code = every
        if code is None:
            ok = allowed.get(tp.topic)
            if ok is None:
                ok = allowed[tp.topic] = g.allowed("topic", tp.topic)
            code = None if ok else ErrorCode.topic_authorization_failed
        if code is not None:
            codes[tp] = code
            offsets.pop(tp, None)

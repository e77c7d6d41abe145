"""Shared by the group handlers: request field conversions, and topics named by id (OffsetCommit
v10+, OffsetFetch v10+, KIP-848/KIP-516) resolved to names."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.coordinator.group.types import OffsetCommitData
from oncelog.protocol.errors import ErrorCode
from oncelog.types import TopicPartition

_MS = datetime.timedelta(milliseconds=1)


def ms(value: datetime.timedelta | int) -> int:
    """A kio duration field in whole milliseconds (-1 stays -1)."""
    if isinstance(value, datetime.timedelta):
        return round(value / _MS)
    return int(value)


def client_host(client: Client) -> str:
    """The requesting client's address as Kafka shows it ("/127.0.0.1")."""
    return f"/{client.host}" if client.host else ""


def unknown_id_key(topic_id: Any) -> str:
    """The stand-in topic name under which a request's unknown topic id is answered: no topic can
    have it (Kafka's topic names are [a-zA-Z0-9._-] only)."""
    return f"<unknown topic id {topic_id}>"


def topic_key(broker: BrokerContext, t: Any) -> str:
    """The name of a request topic entity that names its topic by ``name`` or, in the versions
    that have it, by ``topic_id``: an id the broker does not know gives ``unknown_id_key``."""
    topic_id = getattr(t, "topic_id", None)
    if topic_id is None or hasattr(t, "name"):
        return t.name
    meta = broker.replicas.topic_by_id(topic_id)
    return meta.name if meta is not None else unknown_id_key(topic_id)


def topic_id_of(broker: BrokerContext, name: str) -> Any:
    """The id of topic ``name`` for an answer that names topics by id (the all-zero id when the
    topic is unknown, as Kafka answers an id it cannot resolve)."""
    meta = broker.replicas.topics.get(name)
    return meta.topic_id if meta is not None else uuid.UUID(int=0)


def requested_offsets(broker: BrokerContext, topics: Any) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetCommitData]]:
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


def authorize_offsets(g: Any, group_id: str, codes: dict[TopicPartition, ErrorCode],
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

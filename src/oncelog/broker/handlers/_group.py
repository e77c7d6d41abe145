"""Shared by the group handlers: request field conversions."""

from __future__ import annotations

import datetime
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


def requested_offsets(broker: BrokerContext, topics: Any) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetCommitData]]:
    """The offsets of an OffsetCommit / TxnOffsetCommit request: (codes already decided, offsets
    to commit). Partitions the broker does not have get UNKNOWN_TOPIC_OR_PARTITION."""
    codes: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetCommitData] = {}
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if not broker.replicas.exists(tp):
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
        code = every
        if code is None:
            ok = allowed.get(tp.topic)
            if ok is None:
                ok = allowed[tp.topic] = g.allowed("topic", tp.topic)
            code = None if ok else ErrorCode.topic_authorization_failed
        if code is not None:
            codes[tp] = code
            offsets.pop(tp, None)

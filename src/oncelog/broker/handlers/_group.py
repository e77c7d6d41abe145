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

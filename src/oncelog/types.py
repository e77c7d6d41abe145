"""Distinct types for the identifiers that flow through the broker.

``NewType`` gives the type checker a way to tell a producer id from an offset; at run time they
are plain ints and strings, so they cost nothing on hot paths.
"""

from __future__ import annotations

from typing import NamedTuple, NewType

Offset = NewType("Offset", int)
ProducerId = NewType("ProducerId", int)
ProducerEpoch = NewType("ProducerEpoch", int)
Sequence = NewType("Sequence", int)
TransactionalId = NewType("TransactionalId", str)
GroupId = NewType("GroupId", str)
TopicName = NewType("TopicName", str)
TimestampMs = NewType("TimestampMs", int)

NO_PRODUCER_ID = ProducerId(-1)
NO_PRODUCER_EPOCH = ProducerEpoch(-1)
NO_SEQUENCE = Sequence(-1)


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

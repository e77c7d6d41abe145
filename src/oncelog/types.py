"""Distinct types for the identifiers of the transaction machinery, and topic-partitions.

``NewType`` gives the type checker a way to tell a producer id from an epoch or an offset; at run
time they are plain ints and strings, so they cost nothing. They are used where ids of several
kinds meet: the transaction log records, the transaction shard and its marker jobs.
"""

from __future__ import annotations

from typing import NamedTuple, NewType

ProducerId = NewType("ProducerId", int)
ProducerEpoch = NewType("ProducerEpoch", int)
TransactionalId = NewType("TransactionalId", str)

NO_PRODUCER_ID = ProducerId(-1)
NO_PRODUCER_EPOCH = ProducerEpoch(-1)


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

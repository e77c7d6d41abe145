"""One batch on its way to a store-backed engine's commit (the PostgreSQL group commit, the
diskless object writer): offsets already assigned, ``data`` the whole v2 batch with its base
offset and partition leader epoch rewritten, the other fields its header's. ``future``
completes (None) after the COMMIT that makes the batch durable, or fails with a KafkaError.
``drained`` (issue 31): ids of the ``oncelog.outbox`` rows the batch holds, deleted in that
same COMMIT. Engine-neutral, so no engine imports another for it."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

__all__ = ["BatchAppend"]


@dataclass(slots=True)
class BatchAppend:
    partition_id: int
    what: str  # "topic-partition", for messages
    leader_epoch: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    data: bytes
    future: Future = field(default_factory=Future)
    drained: tuple[int, ...] = ()

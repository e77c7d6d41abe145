"""Leader epochs of a partition (KIP-101, KIP-320): the checks and the end-offset rule. Pure.

Every batch a leader appends carries the leader's epoch in its ``partitionLeaderEpoch`` field
(bytes 12..16, outside the CRC: ``records.offset_prefix``). The local engine always writes 0
(the embedded broker is the only leader there ever is); the PostgreSQL engine writes the epoch
it leads under, and stores it in ``oncelog_batch.leader_epoch`` too. Epochs only grow along a
partition's offsets, so the batches themselves are the partition's epoch history (Kafka keeps
a separate ``leader-epoch-checkpoint`` file for the same facts).

``check_current_epoch`` is Kafka's ``Partition.checkCurrentLeaderEpoch`` (Fetch v9+,
ListOffsets v4+, OffsetForLeaderEpoch v2+); ``end_offset_for_epoch`` is Kafka's
``LeaderEpochFileCache.endOffsetFor`` as the leader answers it.
"""

from __future__ import annotations

from typing import Callable

from oncelog.protocol.errors import FencedLeaderEpoch, UnknownLeaderEpoch

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "check_current_epoch", "end_offset_for_epoch"]

#: RecordBatch.NO_PARTITION_LEADER_EPOCH: "no epoch known" in requests and answers
UNDEFINED_EPOCH = -1
#: EpochEndOffset.UNDEFINED_EPOCH_OFFSET
UNDEFINED_OFFSET = -1

#: ``bounds(epoch)`` -> (the largest epoch <= ``epoch`` among stored batches or None, the base
#: offset of the first stored batch whose epoch > ``epoch`` or None)
EpochBounds = Callable[[int], "tuple[int | None, int | None]"]


def check_current_epoch(what: str, requested: int, current: int) -> None:
    """The client's ``current_leader_epoch`` against the leader's: -1 (unknown) passes; an older
    one raises FencedLeaderEpoch (the client's metadata is stale), a newer one
    UnknownLeaderEpoch (this broker's is: the client should retry)."""
    if requested == UNDEFINED_EPOCH or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpoch(f"{what}: current leader epoch {requested} is older than the leader's {current}")
    raise UnknownLeaderEpoch(f"{what}: current leader epoch {requested} is newer than the leader's {current}")


def end_offset_for_epoch(requested: int, current: int, log_end: int, bounds: EpochBounds) -> tuple[int, int]:
    """``(epoch, end offset)`` for OffsetForLeaderEpoch, as a leader whose epoch is ``current``
    and log end ``log_end`` answers it:

    * -1, or an epoch above the current one: ``(-1, -1)`` (UNDEFINED; no error);
    * the current epoch: ``(current, log_end)``;
    * an older epoch: the largest epoch <= it that wrote batches (or the requested one when
      none did: its data is gone or never existed) and the start offset of the next greater
      epoch: the base offset of its first batch, or ``log_end`` when no later batch exists
      (the current epoch, which starts at the log end until it writes).

    ``bounds`` is asked only for an older epoch (it may query a store)."""
    if requested == UNDEFINED_EPOCH or requested > current:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if requested == current:
        return current, log_end
    floor, next_start = bounds(requested)
    end = log_end if next_start is None else min(next_start, log_end)
    return (requested if floor is None else floor), end

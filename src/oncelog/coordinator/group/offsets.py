"""Committed offsets and pending transactional offsets of the groups of one ``__consumer_offsets``
partition (R3, R13).

Only the replay of ``__consumer_offsets`` records calls the mutating methods here (``put``,
``delete``, ``put_pending``, ``complete``), so the store after a restart is the store before it.

Transactional offsets (TxnOffsetCommit) wait per producer id in ``pending``, invisible to
OffsetFetch and to the group, until the producer's COMMIT marker is replayed (they become
committed offsets) or its ABORT marker (they are dropped). A committed transactional offset
replaces the group's current offset only if its record is newer in the log than the record of
the current one (as Kafka does): a plain commit made after the transactional one wins.

Every offset remembers ``record_offset``, the log offset of the record that stored it.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.types import TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1: none (the group's retention applies)
    record_offset: int


GroupOffsets = dict[TopicPartition, CommittedOffset]


class OffsetStore:
    def __init__(self) -> None:
        self.committed: dict[str, GroupOffsets] = {}
        #: producer id -> group -> offsets waiting for the producer's transaction to end
        self.pending: dict[int, dict[str, GroupOffsets]] = {}
        #: producer id -> the highest epoch seen in its transactional records and markers
        self.producer_epochs: dict[int, int] = {}

    # -- queries -----------------------------------------------------------------------------

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        offsets = self.committed.get(group)
        return None if offsets is None else offsets.get(tp)

    def of_group(self, group: str) -> GroupOffsets:
        return self.committed.get(group, {})

    def has_offsets(self, group: str) -> bool:
        return bool(self.committed.get(group))

    def has_pending(self, group: str, tp: TopicPartition | None = None) -> bool:
        """Whether a transaction holds uncommitted offsets for the group (for ``tp``)."""
        for groups in self.pending.values():
            offsets = groups.get(group)
            if offsets and (tp is None or tp in offsets):
                return True
        return False

    def pending_of(self, producer_id: int) -> dict[str, GroupOffsets]:
        return self.pending.get(producer_id, {})

    def groups(self) -> set[str]:
        """Every group with committed or pending offsets."""
        out = {g for g, offs in self.committed.items() if offs}
        for groups in self.pending.values():
            out.update(groups)
        return out

    # -- replay ------------------------------------------------------------------------------

    def put(self, group: str, tp: TopicPartition, value: CommittedOffset) -> None:
        self.committed.setdefault(group, {})[tp] = value

    def delete(self, group: str, tp: TopicPartition) -> None:
        offsets = self.committed.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.committed[group]

    def delete_group(self, group: str) -> None:
        self.committed.pop(group, None)

    def note_epoch(self, producer_id: int, epoch: int) -> None:
        if epoch > self.producer_epochs.get(producer_id, -1):
            self.producer_epochs[producer_id] = epoch

    def put_pending(self, producer_id: int, epoch: int, group: str, tp: TopicPartition, value: CommittedOffset) -> None:
        self.note_epoch(producer_id, epoch)
        self.pending.setdefault(producer_id, {}).setdefault(group, {})[tp] = value

    def complete(self, producer_id: int, commit: bool) -> set[str]:
        """Apply the end of ``producer_id``'s transaction. Returns the groups it touched.
        Idempotent: a second marker for the same transaction finds nothing pending."""
        groups = self.pending.pop(producer_id, {})
        if commit:
            for group, offsets in groups.items():
                current = self.committed.setdefault(group, {})
                for tp, value in offsets.items():
                    old = current.get(tp)
                    if old is None or old.record_offset < value.record_offset:
                        current[tp] = value
        return set(groups)

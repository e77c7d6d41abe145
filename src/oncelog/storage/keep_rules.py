"""The keep rules of log compaction, free of any storage engine (R4): the one place that decides
which records, batches and markers a compaction pass keeps. The local-files cleaner
(storage/engines/local/cleaner.py, whose module docstring states the rules) and the PostgreSQL engine's
compaction (storage/engines/postgres/log.py ``compact``) both use it, so the two engines cannot disagree.

Use: feed every batch of the cleanable range, in offset order, to ``observe`` (pass 1: the
latest offset of each key, which transactions aborted, each producer's last batch); then feed
the same batches, in the same order, to ``decide`` (pass 2), which answers the batch to keep
(the same bytes when nothing goes, a filtered batch, or the header alone for a producer's last
batch) or None to drop it. ``next_deadline`` is then the earliest time a kept tombstone or marker
becomes removable (None: nothing is waiting).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from oncelog.protocol import records
from oncelog.protocol.errors import CorruptMessage, InvalidRecord

__all__ = ["KeepRules", "MIN_CLEANABLE_DIRTY_RATIO", "Scan", "is_compacted"]

log = logging.getLogger(__name__)

#: a compaction pass runs once the dirty part of the cleanable range reaches this share of it
MIN_CLEANABLE_DIRTY_RATIO = 0.5  # Kafka's min.cleanable.dirty.ratio default


def is_compacted(cleanup_policy: str) -> bool:
    """Whether cleanup.policy includes compaction (``compact`` or ``compact,delete``)."""
    return "compact" in cleanup_policy.split(",")


@dataclass
class Scan:
    """What pass 1 learns over the cleanable range."""

    latest: dict[bytes, int] = field(default_factory=dict)  # key -> offset of its last decided record
    aborted: set[int] = field(default_factory=set)  # base offsets of aborted transactional batches
    decided: set[int] = field(default_factory=set)  # base offsets of transactional batches with a marker
    #: producer id -> base offset of its last data batch (not a marker: a marker carries no
    #: sequence, so keeping it alone would lose the producer's last sequence, as Kafka's cleaner
    #: keeps the last data batch of each producer)
    last_batch: dict[int, int] = field(default_factory=dict)
    #: base offsets of batches whose records do not decode (corrupt, or expanding beyond the
    #: bound): kept exactly as they are, their keys unknown, so nothing they might supersede goes
    undecodable: set[int] = field(default_factory=set)


class KeepRules:
    """One pass's decisions (see the module docstring). ``what`` names the log in warnings."""

    def __init__(self, now_ms: int, delete_retention_ms: int, what: object = "") -> None:
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.what = what
        self.scan = Scan()
        self.next_deadline: int | None = None
        self._open_txns: dict[int, list[tuple[int, list[tuple[bytes, int]]]]] = {}
        self._retained: dict[int, bool] = {}  # producer id -> its current transaction kept a record

    # -- pass 1 -------------------------------------------------------------------------------

    def observe(self, h: records.BatchHeader, data: bytes) -> None:
        """Pass 1 over one batch. A batch whose records do not decode is remembered as such
        (kept as it is in pass 2; it supersedes nothing)."""
        try:
            self._scan_batch(h, data)
        except (CorruptMessage, InvalidRecord) as exc:
            if not self.scan.undecodable:
                log.warning("%s: batch at offset %d does not decode (%s); such batches are kept as they are",
                            self.what, h.base_offset, exc)
            self.scan.undecodable.add(h.base_offset)

    def _scan_batch(self, h: records.BatchHeader, data: bytes) -> None:
        scan, open_txns = self.scan, self._open_txns
        if h.producer_id >= 0 and not h.is_control:
            scan.last_batch[h.producer_id] = h.base_offset
        if h.is_control:
            marker = records.read_control_marker(data)
            for base, recs in open_txns.pop(h.producer_id, []):
                scan.decided.add(base)
                if marker.commit:
                    for key, offset in recs:
                        if offset > scan.latest.get(key, -1):
                            scan.latest[key] = offset
                else:
                    scan.aborted.add(base)
            return
        keyed = [(r.key, r.offset) for r in records.iter_records(data) if r.key is not None]
        if h.is_transactional:
            open_txns.setdefault(h.producer_id, []).append((h.base_offset, keyed))
            return
        for key, offset in keyed:
            if offset > scan.latest.get(key, -1):
                scan.latest[key] = offset

    # -- pass 2 -------------------------------------------------------------------------------

    def decide(self, h: records.BatchHeader, data: bytes) -> bytes | None:
        """The batch to keep for ``data`` (``data`` itself when unchanged), or None to drop it."""
        scan = self.scan
        if h.base_offset in scan.undecodable:
            return data
        now, keep_for = self.now_ms, self.delete_retention_ms
        last_of_producer = h.producer_id >= 0 and scan.last_batch.get(h.producer_id) == h.base_offset

        def deadline(ts: int) -> None:
            d = ts + keep_for
            self.next_deadline = d if self.next_deadline is None else min(self.next_deadline, d)

        if h.is_control:
            had_data = self._retained.pop(h.producer_id, False)
            if had_data:
                return data
            if h.max_timestamp + keep_for > now:
                deadline(h.max_timestamp)
                return data
            return None
        aborted = h.is_transactional and h.base_offset in scan.aborted
        if aborted and not last_of_producer:
            return None
        decided = not h.is_transactional or h.base_offset in scan.decided

        def keep(r: records.Record) -> bool:
            if r.key is None:
                return True
            latest = scan.latest.get(r.key, -1)
            if latest > r.offset:
                return False  # superseded
            if r.value is None and decided and latest == r.offset:
                if r.timestamp + keep_for <= now:
                    return False  # an old tombstone
                deadline(r.timestamp)
            return True

        # a producer's last batch stays, if need be as an empty header, so that the producer state
        # rebuilt from the log keeps its epoch and sequence (and an open transaction its start)
        kept = records.filter_batch(data, (lambda r: False) if aborted else keep, keep_empty=last_of_producer)
        if kept is not None and h.is_transactional:
            self._retained[h.producer_id] = True
        return kept

"""Per-partition producer state: what makes idempotent and transactional appends safe (R6, R7).

For every producer id (PID) that wrote to the partition we keep its epoch, the metadata of its
last ``MAX_BATCHES`` (5) batches (first/last sequence, first/last offset, timestamp) and, when it
has a transaction open on this partition, the first offset of that transaction.

Theory of operation (as Kafka's ``ProducerStateManager``):

* ``check(header)`` validates a producer batch against the state *without changing it*. It
  returns the metadata of an identical earlier batch when the batch is a duplicate (the caller
  then answers with the original offsets and writes nothing), or None when the batch may be
  appended; otherwise it raises the error Kafka would:
  - epoch below the current one: INVALID_PRODUCER_EPOCH;
  - a new (higher) epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
  - a PID this partition does not know, with a sequence other than 0: UNKNOWN_PRODUCER_ID
    (KIP-360: the client then resets its sequence numbers);
  - same epoch: first sequence must be last sequence + 1 (wrapping after 2^31-1), else
    OUT_OF_ORDER_SEQUENCE_NUMBER. A batch older than the 5 remembered ones is therefore
    OUT_OF_ORDER too (Kafka does the same), never silently written twice.
* ``update(header, base_offset, now_ms)`` applies an appended batch (after the append: validate,
  append, then update, so a failed append changes nothing).
* ``snapshot`` / ``load_snapshot`` persist the state as of a log offset, in a checksummed file
  ``<offset>.snapshot`` next to the segments; after a crash the state is rebuilt from the newest
  snapshot at or below the log end plus a replay of the batch headers after it, or from the whole
  log when there is no usable snapshot. Replay reads batch headers only (sequence numbers are in
  the header), never records.
* Producer ids idle for longer than ``producer.id.expiration.ms`` and with no open transaction are
  forgotten (KIP-854).

Single-threaded: owned by one partition and called from the broker's event loop.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c

from oncelog.protocol.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber, UnknownProducerId
from oncelog.protocol.records import BatchHeader

log = logging.getLogger(__name__)

MAX_BATCHES = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_MAGIC = b"OLPS"
_SNAPSHOT_VERSION = 1


def next_sequence(seq: int, delta: int = 1) -> int:
    """Sequence numbers wrap from 2^31-1 to 0, as Kafka's do."""
    s = seq + delta
    return s - INT32_MAX - 1 if s > INT32_MAX else s


class BatchMetadata(NamedTuple):
    """One appended batch of a producer (a NamedTuple: built on every idempotent append, and
    four times cheaper to build than a frozen dataclass)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def to_json(self) -> dict:
        return {
            "pid": self.producer_id,
            "epoch": self.epoch,
            "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in self.batches],
            "ts": self.last_timestamp,
            "coord_epoch": self.coordinator_epoch,
            "txn_first": self.current_txn_first_offset,
        }

    @classmethod
    def from_json(cls, d: dict) -> "ProducerEntry":
        e = cls(int(d["pid"]), int(d["epoch"]))
        for b in d["batches"]:
            e.batches.append(BatchMetadata(*map(int, b)))
        e.last_timestamp = int(d["ts"])
        e.coordinator_epoch = int(d["coord_epoch"])
        e.current_txn_first_offset = None if d["txn_first"] is None else int(d["txn_first"])
        return e


class ProducerStateManager:
    def __init__(self, directory: Path, topic_partition: str = "") -> None:
        self.directory = Path(directory)
        self.tp = topic_partition
        self.entries: dict[int, ProducerEntry] = {}
        #: the log offset up to which this state reflects the log (exclusive)
        self.map_end_offset = 0
        #: producer id -> first offset of its open transaction on this partition (for the LSO)
        self.ongoing: dict[int, int] = {}
        #: what the loaded snapshot carried besides the producers (see write_snapshot)
        self.snapshot_extra: dict = {}

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction on this partition, or None (R15)."""
        return min(self.ongoing.values()) if self.ongoing else None

    # -- validation and update (the produce path) ----------------------------------------------

    def check(self, h: BatchHeader) -> BatchMetadata | None:
        """Validate a producer batch; the duplicate's metadata, or None if it may be appended.

        Raises InvalidProducerEpoch, OutOfOrderSequenceNumber or UnknownProducerId. Changes
        nothing. Batches without a producer id are always accepted.
        """
        if h.producer_id < 0:
            return None
        entry = self.entries.get(h.producer_id)
        first_seq, last_seq = h.base_sequence, h.last_sequence
        if entry is None:
            if first_seq != 0:
                raise UnknownProducerId(
                    f"{self.tp}: producer {h.producer_id} is unknown here and its batch starts at sequence "
                    f"{first_seq}, not 0"
                )
            return None
        if h.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"{self.tp}: producer {h.producer_id} epoch {h.producer_epoch} is older than the current epoch {entry.epoch}"
            )
        if h.producer_epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceNumber(
                    f"{self.tp}: producer {h.producer_id} new epoch {h.producer_epoch} must start at sequence 0, "
                    f"got {first_seq}"
                )
            return None
        expected = next_sequence(entry.last_seq) if entry.last_seq >= 0 else 0
        if first_seq == expected:
            # The common case, and never a duplicate: every remembered batch ends at or before
            # the last sequence.
            return None
        dup = entry.find_duplicate(first_seq, last_seq)
        if dup is not None:
            return dup
        raise OutOfOrderSequenceNumber(
            f"{self.tp}: producer {h.producer_id} epoch {h.producer_epoch}: sequence {first_seq} received, "
            f"{expected} expected"
        )

    def duplicate_of(self, h: BatchHeader) -> BatchMetadata | None:
        """The remembered batch ``h`` repeats (same producer, epoch and sequence range), or None.
        Never raises: the partition asks it before anything else about a produced batch
        (``Partition.append_produced``: a written batch's retry skips the transaction checks)."""
        entry = self.entries.get(h.producer_id) if h.producer_id >= 0 else None
        if entry is None or h.producer_epoch != entry.epoch or h.base_sequence < 0:
            return None
        return entry.find_duplicate(h.base_sequence, h.last_sequence)

    def check_epoch(self, h: BatchHeader) -> None:
        """The epoch rule alone, for batches the broker's coordinators write on a producer's
        behalf (transactional offset commits): no sequence numbers, but a fenced epoch is still
        refused. Raises InvalidProducerEpoch."""
        entry = self.entries.get(h.producer_id) if h.producer_id >= 0 else None
        if entry is not None and h.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"{self.tp}: producer {h.producer_id} epoch {h.producer_epoch} is older than the current epoch {entry.epoch}"
            )

    def update(self, h: BatchHeader, base_offset: int, now_ms: int | None = None, *,
               coordinator_epoch: int | None = None) -> None:
        """Apply a batch that is now in the log at ``base_offset`` (live append or replay).
        ``coordinator_epoch``: a marker's, when known; the producer's entry keeps the highest
        (markers from an older coordinator epoch are then refused, ``Partition.append_marker``)."""
        last_offset = base_offset + h.last_offset_delta
        self.map_end_offset = last_offset + 1
        if h.producer_id < 0:
            return
        entry = self.entries.get(h.producer_id)
        if entry is None or h.producer_epoch > entry.epoch:
            old_txn = entry.current_txn_first_offset if entry is not None else None
            old_coordinator = entry.coordinator_epoch if entry is not None else -1
            entry = ProducerEntry(h.producer_id, h.producer_epoch)
            entry.current_txn_first_offset = old_txn
            entry.coordinator_epoch = old_coordinator
            self.entries[h.producer_id] = entry
        ts = h.max_timestamp if now_ms is None else now_ms
        entry.last_timestamp = max(entry.last_timestamp, ts)
        if h.is_control:
            # A transaction marker ends the producer's open transaction on this partition.
            if coordinator_epoch is not None and coordinator_epoch > entry.coordinator_epoch:
                entry.coordinator_epoch = coordinator_epoch
            entry.current_txn_first_offset = None
            self.ongoing.pop(h.producer_id, None)
            return
        if h.base_sequence >= 0:
            entry.batches.append(BatchMetadata(h.base_sequence, h.last_sequence, base_offset, last_offset, ts))
        if h.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = base_offset
            self.ongoing[h.producer_id] = base_offset

    # -- expiry ------------------------------------------------------------------------------------

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle for longer than ``expiration_ms`` with no open transaction."""
        gone = [
            pid
            for pid, e in self.entries.items()
            if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in gone:
            del self.entries[pid]
        return gone

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        out = []
        for p in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = p.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def write_snapshot(self, keep: int = 2, *, extra: dict | None = None) -> Path:
        """Persist the state as of ``map_end_offset``; keeps the newest ``keep`` snapshots.

        ``extra`` is stored alongside and comes back as ``snapshot_extra`` on load (the
        partition records there what it needs to check its other derived files).
        Written to a temporary file, fsynced and renamed: a crash leaves the old snapshot or the
        new one, and a torn file is detected by its checksum.
        """
        payload = json.dumps(
            {"end": self.map_end_offset, "producers": [e.to_json() for e in self.entries.values()], "extra": extra or {}},
            separators=(",", ":"),
        ).encode()
        data = _SNAPSHOT_MAGIC + struct.pack(">HI", _SNAPSHOT_VERSION, crc32c.crc32c(payload)) + payload
        path = self.snapshot_path(self.map_end_offset)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for old in self.snapshot_offsets()[:-keep]:
            self.snapshot_path(old).unlink(missing_ok=True)
        return path

    def load_latest_snapshot(self, log_end_offset: int) -> bool:
        """Load the newest valid snapshot at or below ``log_end_offset``.

        Snapshots above the log end (the log was truncated after a crash) and damaged ones are
        deleted. Returns False, with an empty state at offset 0, when none is usable.
        """
        for offset in reversed(self.snapshot_offsets()):
            path = self.snapshot_path(offset)
            if offset > log_end_offset:
                log.warning("%s: deleting producer snapshot %s beyond the log end %d", self.tp, path.name, log_end_offset)
                path.unlink(missing_ok=True)
                continue
            try:
                self._read_snapshot(path)
                return True
            except (ValueError, KeyError, TypeError, OSError, struct.error) as exc:
                log.warning("%s: ignoring damaged producer snapshot %s: %s", self.tp, path.name, exc)
                path.unlink(missing_ok=True)
        self.entries.clear()
        self.ongoing.clear()
        self.map_end_offset = 0
        return False

    def _read_snapshot(self, path: Path) -> None:
        data = path.read_bytes()
        if len(data) < 10 or data[:4] != _SNAPSHOT_MAGIC:
            raise ValueError("not a producer snapshot")
        version, crc = struct.unpack_from(">HI", data, 4)
        payload = data[10:]
        if version != _SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {version} is unknown")
        if crc32c.crc32c(payload) != crc:
            raise ValueError("checksum mismatch")
        doc = json.loads(payload)
        entries = {}
        for d in doc["producers"]:
            e = ProducerEntry.from_json(d)
            entries[e.producer_id] = e
        self.entries = entries
        self.map_end_offset = int(doc["end"])
        self.snapshot_extra = dict(doc.get("extra", {}))
        self.ongoing = {pid: e.current_txn_first_offset for pid, e in entries.items() if e.current_txn_first_offset is not None}

    def reset(self, offset: int) -> None:
        """Forget everything: the state of an empty log starting at ``offset``."""
        self.entries.clear()
        self.ongoing.clear()
        self.map_end_offset = offset

    def truncate_and_reload(self, log_start_offset: int) -> None:
        """Drop snapshots below the log start (their segments are gone)."""
        offsets = self.snapshot_offsets()
        for off in offsets[:-1]:
            if off < log_start_offset:
                self.snapshot_path(off).unlink(missing_ok=True)

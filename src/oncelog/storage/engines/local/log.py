"""A partition's log: an ordered list of segments in ``<data>/<topic>-<partition>/``.

Theory of operation. Offsets are assigned here: ``append`` takes a validated batch from a
producer, gives it the next offsets by rewriting the 16 bytes outside its CRC, and writes it to
the active (last) segment in one ``writev`` (no copy of the batch in Python). Once ``append``
returns, the batch is in the OS page cache and survives kill -9 of the broker (R1); the fsync
policy (``flush.messages`` / ``flush.ms``, default: never per message; always on roll) decides
when it also survives power loss. ``read`` answers fetches with file ranges (``FileSlice``) of
whole batches, found through the sparse offset index and batch headers only, for the broker to
``sendfile``. Retention (R4) deletes whole segments, never the active one; deleted files are
renamed ``*.deleted`` and their descriptors stay open for ``file.delete.delay.ms`` so in-flight
file slices remain readable.

``open`` recovers: every segment's indexes are validated (rebuilt from the ``.log`` when missing
or damaged) and its tail is CRC-checked; a torn or corrupt tail of the active segment is cut with
a warning. Damage inside an inactive segment is never cut (segment.py, damage.py): reads serve
everything before it, answer CORRUPT_MESSAGE for the offsets it covers, and go on after it;
``iter_batches`` and ``iter_headers`` step over it (R22).

Concurrency: everything is synchronous and single-threaded; the broker calls a ``PartitionLog``
from its event loop only. Time is injected (``now_ms``); nothing here reads the clock.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from bisect import bisect_right
from pathlib import Path
from typing import Iterator

from oncelog.protocol.errors import CorruptMessage, KafkaStorageError, MessageTooLarge, OffsetOutOfRange
from oncelog.protocol.records import BatchHeader, iter_records, offset_prefix, record_with_timestamp
from oncelog.protocol.records import iter_batches as _iter_batches
from oncelog.storage.config import LogConfig
from oncelog.storage.engine import Appended, CompactionPass
from oncelog.storage.engines.local.cleaner import Cleaner
from oncelog.storage.engines.local.segment import DELETED_SUFFIX, LogSegment
from oncelog.storage.parts import FileSlice

__all__ = ["PartitionLog"]

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 0x7FFFFFFF  # index entries hold offsets relative to the segment base
_LOG_START_FILE = "log-start-offset"


class PartitionLog:
    """The log of one partition. See the module docstring for the guarantees.

    Raises OffsetOutOfRange for reads outside [log_start_offset, log_end_offset],
    MessageTooLarge for a batch over max.message.bytes, KafkaStorageError on I/O failure.
    ``ValueError`` means a caller bug (for example a header that does not match its bytes).
    """

    def __init__(self, path: Path, config: LogConfig, segments: list[LogSegment], now_ms: int) -> None:
        self.path = path
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start = segments[0].base_offset
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._dir_dirty = False
        # (delete deadline, segment); deadline None: not yet known, set by the next cleanup
        self._graveyard: list[tuple[int | None, LogSegment]] = []
        self._undecodable: set[int] = set()  # base offsets of batches iter_records refused
        self._cleaner: Cleaner | None = None  # compaction's memory of this log (plan_compaction)

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open (creating the directory and a first segment if needed) and recover the log.

        Leftover ``*.deleted`` files are removed, every segment is opened (indexes validated or
        rebuilt, tail CRC-checked and cut if torn), overlapping segments are trimmed, and the
        log start offset is restored from its checkpoint file.
        """
        try:
            path.mkdir(parents=True, exist_ok=True)
            names = sorted(os.listdir(path))
        except OSError as e:
            raise KafkaStorageError(f"cannot open log directory {path}: {e}") from e
        bases: list[int] = []
        logs = set()
        for name in names:
            if name.endswith(DELETED_SUFFIX):
                _unlink(path / name)
            elif name.endswith(".log") and len(name) == 24 and name[:20].isdigit():
                bases.append(int(name[:20]))
                logs.add(name[:20])
        for name in names:  # indexes whose .log is gone
            stem, _, ext = name.partition(".")
            if ext in ("index", "timeindex") and stem not in logs:
                _unlink(path / name)
        bases.sort()
        kw = dict(index_interval_bytes=config.index_interval_bytes, now_ms=now_ms)
        segments = [LogSegment.open(path, b, active=i == len(bases) - 1, **kw) for i, b in enumerate(bases)]
        if not segments:
            segments = [LogSegment.create(path, 0, **kw)]
        for seg, nxt in zip(segments, segments[1:]):
            if seg.next_offset > nxt.base_offset:
                log.warning("%s: segment %d overlaps segment %d; cutting it", path, seg.base_offset, nxt.base_offset)
                seg.truncate_to(nxt.base_offset)
        for seg in segments[:-1]:
            seg.mark_inactive()
        self = cls(path, config, segments, now_ms)
        self._log_start = max(self._log_start, min(self._read_log_start(), self.log_end_offset))
        return self

    def _read_log_start(self) -> int:
        try:
            return int((self.path / _LOG_START_FILE).read_text().strip() or -1)
        except (OSError, ValueError):
            return -1

    def _write_log_start(self) -> None:
        tmp = self.path / (_LOG_START_FILE + ".tmp")
        try:
            tmp.write_text(f"{self._log_start}\n")
            os.replace(tmp, self.path / _LOG_START_FILE)
        except OSError as e:
            raise KafkaStorageError(f"{self.path}: cannot record log start offset: {e}") from e

    # -- state -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def active_base_offset(self) -> int:
        """Base offset of the active (last) segment; it changes exactly when the log rolls."""
        return self._segments[-1].base_offset

    @property
    def leader_epoch(self) -> int:
        """Always 0: the embedded broker is the only leader this log ever has, and every batch
        it appends carries partitionLeaderEpoch 0."""
        return 0

    def epoch_bounds(self, epoch: int) -> tuple[int | None, int | None]:
        """Every batch has epoch 0 (see ``leader_epoch``): (0, None) for an epoch >= 0, (None,
        the log start) below it; (None, None) for an empty log."""
        if self.log_end_offset <= self._log_start:
            return None, None
        return (0, None) if epoch >= 0 else (None, self._log_start)

    def epoch_at(self, offset: int) -> int:
        return 0

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The live segments, oldest first (read-only view for tests and tooling)."""
        return tuple(self._segments)

    # -- writing -----------------------------------------------------------------------------

    def disk_usage(self) -> tuple[int, int]:
        return self.size_bytes, len(self._segments)

    @property
    def outbox_id(self) -> None:
        return None  # no transactional outbox (a cluster-mode feature, issue 31)

    def plan_compaction(self, upper: int, now_ms: int, stop: threading.Event) -> CompactionPass | None:
        """The local cleaner's next pass over this log (storage/engines/local/cleaner.py), or None."""
        if self._cleaner is None:
            self._cleaner = Cleaner(stop)
        return self._cleaner.pass_for(self, upper, now_ms)

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int, *,
               drained: tuple[int, ...] = (), leader_epoch: int = 0) -> Appended:
        """Append a validated producer batch (``header`` is ``parse_header(batch)``), assigning
        offsets from ``log_end_offset``. Rolls first when the active segment is full or old.
        Returns ``(base_offset, last_offset)`` once the bytes are in the page cache; fsyncs when
        the flush policy says so. It is also the engine contract's ``submit``
        (storage/engine.py): the append is complete on return (an ``Appended``). There is no
        outbox here (``drained`` must be empty: a cluster-mode feature, issue 31)."""
        if drained:
            raise ValueError(f"{self.path}: the local engine has no outbox to drain")
        size = header.size
        if len(batch) != size:
            raise ValueError(f"batch has {len(batch)} bytes, its header says {size}")
        if size > self.config.max_message_bytes:
            raise MessageTooLarge(f"record batch of {size} bytes exceeds max.message.bytes {self.config.max_message_bytes}")
        base = self.log_end_offset
        active = self._segments[-1]
        if not active.is_empty and (
            active.size + size > self.config.segment_bytes
            or now_ms - active.roll_start_ms >= self.config.segment_ms
            or base + header.last_offset_delta - active.base_offset > _MAX_RELATIVE_OFFSET
        ):
            active = self._roll(now_ms)
        elif active.is_empty:
            active.roll_start_ms = now_ms
        view = batch if isinstance(batch, memoryview) else memoryview(batch)
        active.append(
            (offset_prefix(batch, base, leader_epoch), view[16:]),
            header._replace(base_offset=base, partition_leader_epoch=leader_epoch),
        )
        self._unflushed_messages += header.records_count
        self._apply_flush_policy(now_ms)
        return Appended((base, base + header.last_offset_delta))

    submit = append  # the engine contract's one append (storage/engine.py): complete on return

    def _apply_flush_policy(self, now_ms: int) -> None:
        c = self.config
        if (c.flush_messages is not None and self._unflushed_messages >= c.flush_messages) or (
            c.flush_ms is not None and now_ms - self._last_flush_ms >= c.flush_ms
        ):
            self.flush(now_ms)

    def maybe_flush(self, now_ms: int) -> None:
        """Fsync if flush.ms has elapsed with unflushed data (for a periodic broker timer)."""
        if self._unflushed_messages and self.config.flush_ms is not None:
            self._apply_flush_policy(now_ms)

    def flush(self, now_ms: int | None = None) -> None:
        """Make everything appended so far durable: fdatasync the active segment (older ones
        were synced when they rolled) and the directory if segments were created."""
        self._segments[-1].flush()
        if self._dir_dirty:
            _fsync_dir(self.path)
            self._dir_dirty = False
        self._unflushed_messages = 0
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll a non-empty active segment older than segment.ms. Returns whether it rolled."""
        active = self._segments[-1]
        if not active.is_empty and now_ms - active.roll_start_ms >= self.config.segment_ms:
            self._roll(now_ms)
            return True
        return False

    def _roll(self, now_ms: int) -> LogSegment:
        old = self._segments[-1]
        old.mark_inactive()
        old.flush()  # inactive segments are durable, so recovery only has to check the active one
        seg = LogSegment.create(self.path, old.next_offset, index_interval_bytes=self.config.index_interval_bytes,
                                now_ms=now_ms)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        return seg

    def truncate_to(self, offset: int, now_ms: int | None = None) -> None:
        """Remove every batch whose last offset >= ``offset`` (a batch containing ``offset``
        goes entirely). Below ``log_start_offset`` the log is emptied and restarts at
        ``offset``. Removed segments stay readable through open slices for file.delete.delay.ms
        counted from ``now_ms`` (default: from the next ``cleanup_deleted``)."""
        if offset >= self.log_end_offset:
            return
        if offset < self._log_start:
            self._truncate_fully(offset, now_ms)
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            self._retire(self._segments.pop(), now_ms)
            self._bases.pop()
        self._segments[-1].truncate_to(offset)
        if self.log_end_offset < self._log_start:  # the cut batch straddled the log start
            self._log_start = self.log_end_offset
            self._write_log_start()

    def _truncate_fully(self, offset: int, now_ms: int | None) -> None:
        for seg in self._segments:
            self._retire(seg, now_ms)
        seg = LogSegment.create(self.path, offset, index_interval_bytes=self.config.index_interval_bytes,
                                now_ms=now_ms or 0)
        self._segments, self._bases = [seg], [offset]
        self._log_start = offset
        self._dir_dirty = True
        self._write_log_start()

    # -- reading -----------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if offset < self._log_start or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"{self.path.name}: offset {offset} outside [{self._log_start}, {self.log_end_offset}]"
            )

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> list[FileSlice]:
        """File ranges of whole batches, starting with the batch that contains ``offset`` (it may
        start before ``offset``), only batches whose last offset < ``max_offset`` (default: the
        log end), at most ``max_bytes`` in total except that with ``min_one_batch`` the first
        batch is returned even when larger (KIP-74). One slice per segment touched.
        ``offset == log_end_offset`` gives ``[]``; outside [log_start_offset, log_end_offset]
        raises OffsetOutOfRange; an offset in a damaged region raises CorruptMessage (a read that
        starts before one stops there). Reads only batch headers, never the data."""
        self._check_offset(offset)
        end_offset = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        slices: list[FileSlice] = []
        remaining = max_bytes
        i = max(0, bisect_right(self._bases, offset) - 1)
        for seg in self._segments[i:]:
            if offset >= end_offset:
                break
            try:
                r = seg.read(max(offset, seg.base_offset), remaining, end_offset, min_one_batch and not slices)
            except CorruptMessage:
                if slices:
                    break  # serve what precedes the damage; the next read at it gets the error
                raise
            if r is None:
                continue
            pos, length = r
            if length:
                slices.append(FileSlice(seg.fd, pos, length))
                remaining -= length
            if pos + length < seg.size or remaining <= 0:
                break
        return slices

    def read_batches(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """The bytes of ``read(...)`` copied into Python: for internal topics and tests."""
        return b"".join(os.pread(s.fd, s.length, s.position) for s in self.read(offset, max_bytes, max_offset))

    def iter_batches(self, from_offset: int | None = None, chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every readable batch from ``from_offset`` (default: the log start) to the end, with its
        bytes: for loading internal topics (coordinator state), never for fetch. Damaged regions
        are stepped over with a warning naming the offsets skipped."""
        offset = self._log_start if from_offset is None else max(from_offset, self._log_start)
        while offset < self.log_end_offset:
            try:
                data = self.read_batches(offset, chunk_bytes)
            except CorruptMessage:
                resume = self._after_damage(offset)
                log.warning("%s: offsets %d..%d cannot be read (damaged segment, see above); skipped", self.path.name,
                            offset, resume - 1)
                offset = resume
                continue
            if not data:
                return
            progressed = False
            for pos, h in _iter_batches(data):
                if h.last_offset >= offset:
                    yield h, data[pos : pos + h.size]
                    offset = h.next_offset
                    progressed = True
            if not progressed:
                raise KafkaStorageError(f"{self.path}: no readable batch at offset {offset}")

    def _after_damage(self, offset: int) -> int:
        """The first offset after the damaged region that covers ``offset`` (which must be one)."""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        seg = self._segments[i]
        d = next((d for d in seg.damage if d.covers(offset)), None)
        if d is not None and d.resume_offset is not None:
            return d.resume_offset
        if i + 1 < len(self._segments):
            return self._segments[i + 1].base_offset
        return max(self.log_end_offset, offset + 1)

    def iter_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of every readable batch whose last offset >= ``from_offset``, oldest first,
        with their final offsets; damaged regions are stepped over. Reads headers only
        (producer-state rebuild, transaction index rebuild)."""
        start = max(from_offset, self._log_start)
        i = max(bisect_right(self._bases, start) - 1, 0)
        for seg in self._segments[i:]:
            for _pos, h in seg.readable_batches(start):
                yield h

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp (ListOffsets -3,
        KIP-734): in the first batch holding the largest max timestamp, the first record carrying
        it (a batch that does not decode answers its base offset); None for an empty log. Scans
        the headers of one segment and decodes one batch."""
        best: LogSegment | None = None
        for seg in self._segments:
            if not seg.is_empty and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        for pos, h in best.readable_batches(max(best.base_offset, self._log_start)):
            if h.max_timestamp == best.max_timestamp:
                offset = h.base_offset
                if h.base_offset not in self._undecodable:
                    try:
                        offset = record_with_timestamp(best.read_bytes(pos, h.size), h.max_timestamp,
                                                       self.config.max_uncompressed_bytes, self._log_start)
                    except CorruptMessage as exc:
                        self._undecodable.add(h.base_offset)
                        log.warning("%s: batch at offset %d does not decode (%s); ListOffsets answers at batch "
                                    "level", self.path, h.base_offset, exc)
                return h.max_timestamp, max(offset, self._log_start)
        return None

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``log_start_offset`` whose
        timestamp >= ``ts_ms`` (ListOffsets). The batch is found through the time index; only
        that one batch is decoded to pick the record. None when no batch reaches ``ts_ms``.
        The special ListOffsets timestamps (-1 latest, -2 earliest) are the caller's."""
        for seg in self._segments:
            if seg.next_offset <= self._log_start:
                continue
            found = seg.find_timestamp(ts_ms, self._log_start)
            if found is None:
                continue
            pos, h = found
            if h.base_offset not in self._undecodable:
                try:
                    for rec in iter_records(seg.read_bytes(pos, h.size), max_uncompressed=self.config.max_uncompressed_bytes):
                        if rec.timestamp >= ts_ms and rec.offset >= self._log_start:
                            return rec.offset, rec.timestamp
                except CorruptMessage as exc:
                    # Remembered, so a batch that does not decode (or a decompression bomb
                    # written before produce validated records) costs one attempt, not one per request.
                    self._undecodable.add(h.base_offset)
                    log.warning("%s: batch at offset %d does not decode (%s); ListOffsets answers at batch level",
                                self.path, h.base_offset, exc)
            return max(h.base_offset, self._log_start), h.max_timestamp
        return None

    # -- retention ---------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Delete the oldest segments breaching retention.ms (age measured from the segment's
        largest timestamp, or its mtime if it has none) or retention.bytes, never the active
        segment; advance log_start_offset. Returns the number of segments deleted. Their files
        become ``*.deleted`` and are removed by ``cleanup_deleted`` after file.delete.delay.ms.
        Only for cleanup.policy ``delete`` (or ``compact,delete``): a compacted-only log, such as
        ``__consumer_offsets``, keeps every segment (the cleaner bounds it), as in Kafka."""
        c = self.config
        if "delete" not in c.cleanup_policy.split(","):
            return 0
        doomed = 0
        excess = self.size_bytes - c.retention_bytes if c.retention_bytes >= 0 else 0
        for seg in self._segments[:-1]:
            if c.retention_ms >= 0 and now_ms - seg.retention_timestamp_ms() > c.retention_ms:
                pass
            elif c.retention_bytes >= 0 and excess - seg.size >= 0:
                pass
            else:
                break
            excess -= seg.size
            doomed += 1
        if doomed:
            self._drop_oldest(doomed, now_ms)
        return doomed

    def set_log_start_offset(self, offset: int, now_ms: int | None = None) -> None:
        """Advance the log start (DeleteRecords): offsets below it become unreadable, segments
        entirely below it are deleted (never the active one). No-op if not an advance; raises
        OffsetOutOfRange beyond log_end_offset. The new start survives restarts. ``now_ms`` as
        in ``truncate_to``."""
        if offset <= self._log_start:
            return
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(f"{self.path.name}: log start {offset} beyond log end {self.log_end_offset}")
        self._log_start = offset
        doomed = 0
        for seg, nxt in zip(self._segments, self._segments[1:]):
            if nxt.base_offset > offset:
                break
            doomed += 1
        if doomed:
            self._drop_oldest(doomed, now_ms)
        self._write_log_start()

    def _drop_oldest(self, count: int, now_ms: int | None) -> None:
        for seg in self._segments[:count]:
            self._retire(seg, now_ms)
        del self._segments[:count]
        del self._bases[:count]
        if self._segments[0].base_offset > self._log_start:
            self._log_start = self._segments[0].base_offset
            self._write_log_start()

    def replace_segments(self, old: list[LogSegment], new: LogSegment, now_ms: int) -> None:
        """Compaction (storage/engines/local/cleaner.py): put ``new`` in the place of ``old``, consecutive live
        segments other than the active one, whose files the cleaner has already moved away.
        ``new`` starts at ``old[0].base_offset`` and holds a subset of their batches. The old
        segments are retired like deleted ones (their open slices stay readable for
        file.delete.delay.ms). Raises ValueError (a caller bug) if ``old`` is not such a run."""
        try:
            i = next(k for k, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            raise ValueError(f"{self.path}: segment {old[0].base_offset} is not live") from None
        if (self._segments[i : i + len(old)] != old or i + len(old) >= len(self._segments)
                or new.base_offset != old[0].base_offset):
            raise ValueError(f"{self.path}: {old} is not a run of inactive live segments starting at {new.base_offset}")
        for seg in old:
            self._retire(seg, now_ms)
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]

    def _retire(self, seg: LogSegment, now_ms: int | None) -> None:
        seg.rename_to_deleted()
        deadline = None if now_ms is None else now_ms + self.config.file_delete_delay_ms
        self._graveyard.append((deadline, seg))

    @property
    def pending_deletes(self) -> int:
        """Retired segments whose files are still open, waiting for file.delete.delay.ms."""
        return len(self._graveyard)

    def cleanup_deleted(self, now_ms: int) -> int:
        """Close and unlink retired segments whose delay has passed. Returns how many."""
        delay = self.config.file_delete_delay_ms
        stamped = [(now_ms + delay if t is None else t, s) for t, s in self._graveyard]
        due = [s for t, s in stamped if t <= now_ms]
        self._graveyard = [(t, s) for t, s in stamped if t > now_ms]
        for seg in due:
            seg.delete()
        return len(due)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every file, pending deletions included (their files are removed)."""
        try:
            if self._segments[-1].fd >= 0:
                self.flush()
        finally:
            for seg in self._segments:
                seg.close()
            for _, seg in self._graveyard:
                seg.delete()
            self._graveyard = []

    def delete(self, now_ms: int | None = None) -> None:
        """Remove the whole partition directory now (DeleteTopics). Without ``now_ms`` every
        descriptor is closed at once; with it they stay open (files already unlinked) until
        ``cleanup_deleted`` runs past ``now_ms`` + file.delete.delay.ms, so in-flight
        ``FileSlice``s stay valid. No other method may be called afterwards."""
        retired = [*self._segments, *(s for _, s in self._graveyard)]
        shutil.rmtree(self.path, ignore_errors=True)
        self._graveyard = []
        for seg in retired:
            seg.index.close()
            seg.timeindex.close()
            if now_ms is None:
                seg.close()
            else:
                self._graveyard.append((now_ms + self.config.file_delete_delay_ms, seg))

    def __repr__(self) -> str:
        return f"PartitionLog({self.path.name}, start={self._log_start}, end={self.log_end_offset})"


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise KafkaStorageError(f"cannot fsync directory {path}: {e}") from e

"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``, named by base offset.

Theory of operation. The ``.log`` is a sequence of complete record batches (magic 2) with
strictly increasing offsets. ``append`` writes a batch with a single ``os.write``/``os.writev``
on a descriptor opened with ``O_APPEND``, so when it returns the bytes are in the OS page cache:
they survive kill -9 of the process (not a power loss; that takes ``flush``, which fdatasyncs).
The index files are derived data, maintained after each successful write and never fsynced.

Opening a segment always validates its indexes and re-reads its *tail* (from the last offset
index entry to the end; at most about ``index.interval.bytes`` plus one batch) with full CRC32C
checks. In the *active* segment the first torn or corrupt batch there and everything after it are
cut: they were being written when the broker died. An *inactive* segment was fsynced when the log
rolled past it, so bad bytes there are damage, not a torn write: they are recorded as a damaged
region (damage.py) and never cut. When an index is missing or inconsistent with the ``.log``,
both are rebuilt by a CRC scan of the whole segment (``recover``), with the same rule. After
``open`` the in-memory state (``next_offset``, ``size``, ``max_timestamp``) is exact.

Reads never copy batch data into Python: they locate positions through the sparse index and then
read only batch headers (``os.pread`` of a small buffer). Every header walk checks that the chain
of headers is sound; a walk that meets damage the open did not see (bytes before the tail, rot
since) records it, logs it once, and stops there. So a read returns only checked bytes: every
batch before a damaged region, CORRUPT_MESSAGE for offsets inside it, and what follows it from
the next sound index entry on (R22). Each byte is walked at most once per process (``CheckedRuns``);
bytes appended since the open, and the tail recovery checked, need no walk. Opening does not walk
the rest of a segment (docs/RELIABILITY.md has the measured cost a full walk would add).

Not thread-safe: a segment belongs to one ``PartitionLog`` driven from one thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import crc32c as _crc32c

from oncelog.protocol.errors import CorruptMessage, KafkaError, KafkaStorageError
from oncelog.protocol.records import BATCH_HEADER_SIZE, CRC_START, BatchHeader, iter_batches, parse_header
from oncelog.storage.engines.local.chain import HeaderChain
from oncelog.storage.engines.local.damage import Damage, why_unreadable
from oncelog.storage.engines.local.index import IndexDamaged, OffsetIndex, TimeIndex

__all__ = ["LogSegment", "segment_stem"]

log = logging.getLogger(__name__)

_SCAN_CHUNK = 1 << 20  # recovery scans: CRC-checked in chunks of this size
DELETED_SUFFIX = ".deleted"

Buffer = bytes | bytearray | memoryview


def segment_stem(base_offset: int) -> str:
    """File name stem of the segment based at ``base_offset``: 20 zero-padded digits."""
    return f"{base_offset:020d}"


class LogSegment:
    """A ``.log`` file with its offset and time indexes.

    Guarantees: after ``create``/``open`` the ``.log`` ends on a batch boundary; ``append``
    returns only once the batch is in the page cache (one write syscall); ``flush`` makes the
    ``.log`` durable with fdatasync; index files are never fsynced and are rebuilt on open when
    they do not match the ``.log``. ``fd`` stays valid until ``close``, also after
    ``rename_to_deleted`` (so readers' file slices keep working). Raises KafkaStorageError when
    the file system fails.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        index: OffsetIndex,
        timeindex: TimeIndex,
        *,
        index_interval_bytes: int,
        now_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.fd = fd
        self.index = index
        self.timeindex = timeindex
        self._interval = max(1, index_interval_bytes)
        #: Broker time the segment's age counts from (for segment.ms): set at creation/open and
        #: by PartitionLog on the first append to an empty segment.
        self.roll_start_ms = now_ms
        self.created_ms = now_ms
        self._size = 0
        self._next_offset = base_offset
        self._max_ts = -1
        self._last_batch_base = -1
        self._bytes_since_index = 0
        self._deleted = False
        #: False for a segment the log has rolled past when it was opened: recovery never cuts it
        self.active = True
        self._chain = HeaderChain(self)  # walks, checked runs, damaged regions

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int) -> LogSegment:
        """A new empty segment. Raises KafkaStorageError if its ``.log`` already exists."""
        stem = directory / segment_stem(base_offset)
        fd = index = None
        try:
            fd = os.open(f"{stem}.log", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            index = OffsetIndex.create(Path(f"{stem}.index"), base_offset)
            timeindex = TimeIndex.create(Path(f"{stem}.timeindex"), base_offset)
        except OSError as e:
            if index is not None:
                index.close()
            if fd is not None:
                os.close(fd)
            raise KafkaStorageError(f"cannot create segment {stem}.log: {e}") from e
        return cls(directory, base_offset, fd, index, timeindex, index_interval_bytes=index_interval_bytes, now_ms=now_ms)

    @classmethod
    def open(cls, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int,
             active: bool = True) -> LogSegment:
        """Open an existing segment: validate (or rebuild) its indexes and CRC-check its tail.
        A torn or corrupt tail of the ``active`` segment is cut (logged as a warning, see
        ``truncated_on_open``); in an inactive one it is recorded as damage (see ``damage``)."""
        stem = directory / segment_stem(base_offset)
        try:
            fd = os.open(f"{stem}.log", os.O_RDWR | os.O_APPEND)
        except OSError as e:
            raise KafkaStorageError(f"cannot open segment {stem}.log: {e}") from e
        size = os.fstat(fd).st_size
        index_path, time_path = Path(f"{stem}.index"), Path(f"{stem}.timeindex")
        damaged = None
        try:
            index = OffsetIndex.load(index_path, base_offset, log_size=size)
            timeindex = TimeIndex.load(time_path, base_offset)
        except IndexDamaged as e:
            damaged = e
            index = OffsetIndex.create(index_path, base_offset)
            timeindex = TimeIndex.create(time_path, base_offset)
        seg = cls(directory, base_offset, fd, index, timeindex, index_interval_bytes=index_interval_bytes, now_ms=now_ms)
        seg.active = active
        if damaged is not None and size > 0:
            log.warning("segment %s.log: %s; rebuilding its indexes", stem, damaged)
        seg.truncated_on_open = seg.recover(from_start=damaged is not None)
        return seg

    #: Bytes cut off the ``.log`` by the recovery that ran when the segment was opened.
    truncated_on_open: int = 0

    # -- state -------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.directory / f"{segment_stem(self.base_offset)}.log"

    @property
    def size(self) -> int:
        """Bytes in the ``.log``: a batch boundary, unless the segment's tail is damaged."""
        return self._size

    @property
    def damage(self) -> tuple[Damage, ...]:
        """The damaged regions known so far (found at open or by a read), by position."""
        return tuple(self._chain.damage)

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (``base_offset`` when empty)."""
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max-timestamp in the segment, -1 when there is none."""
        return self._max_ts

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    def retention_timestamp_ms(self) -> int:
        """The time retention measures the segment's age from: its largest record timestamp, or
        the ``.log``'s last-modified time if no batch carries one (as Kafka does)."""
        if self._max_ts > 0:
            return self._max_ts
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    # -- writing -----------------------------------------------------------------------------

    def append(self, data: Buffer | Sequence[Buffer], header: BatchHeader) -> int:
        """Append one batch whose header (final offsets included) is ``header``; ``data`` is its
        bytes or pieces of them (written with one ``writev``). Returns the batch's position.

        The caller guarantees offsets above ``next_offset - 1`` and ``len(data) == header.size``.
        On a write error the ``.log`` is cut back to its previous size and KafkaStorageError is
        raised; the segment state is unchanged.
        """
        pos = self._size
        try:
            if isinstance(data, (bytes, bytearray, memoryview)):
                written = os.write(self.fd, data)
            else:
                written = os.writev(self.fd, data)
            if written != header.size:
                whole = data if isinstance(data, (bytes, bytearray, memoryview)) else b"".join(data)
                if len(whole) != header.size:
                    raise ValueError(f"batch has {len(whole)} bytes, header says {header.size}")
                view = memoryview(whole)
                while written < header.size:  # short write: rare (signals, near-full disks)
                    written += os.write(self.fd, view[written:])
        except OSError as e:
            self._cut_back(pos)
            raise KafkaStorageError(f"{self.log_path}: append at position {pos} failed: {e}") from e
        except ValueError:
            self._cut_back(pos)
            raise
        if self._chain.damage.open_ended is not None:
            # the file's tail was damaged (an inactive segment that is being written again after a
            # truncation): reads resume at this batch, which gets an index entry
            self._chain.damage.close_open_ended(pos, header.base_offset)
            self._bytes_since_index = self._interval
        self._note(pos, header)
        return pos

    def _cut_back(self, pos: int) -> None:
        try:
            os.ftruncate(self.fd, pos)
        except OSError:
            log.exception("%s: could not cut the log back to %d after a failed write", self.log_path, pos)

    def _note(self, pos: int, h: BatchHeader) -> None:
        """Account for the batch ``h`` that now lives at ``pos`` (append and recovery scans)."""
        if self._bytes_since_index >= self._interval:
            self.index.append(h.base_offset, pos)
            self._bytes_since_index = 0
            running_max = max(self._max_ts, h.max_timestamp)
            if running_max > self.timeindex.last_timestamp:
                self.timeindex.append(running_max, h.base_offset)
        self._bytes_since_index += h.batch_length + 12
        if h.max_timestamp > self._max_ts:
            self._max_ts = h.max_timestamp
        self._next_offset = h.base_offset + h.last_offset_delta + 1
        self._last_batch_base = h.base_offset
        self._size = pos + h.batch_length + 12
        self._chain.checked.add(pos, self._size, self._next_offset)

    def mark_inactive(self) -> None:
        """Called when the log rolls past this segment: record its final max timestamp in the
        time index so a later open knows it without a scan."""
        self.active = False
        if self._max_ts > self.timeindex.last_timestamp and self._last_batch_base >= 0:
            last = self.timeindex.last_offset
            if last is None or self._last_batch_base > last:
                self.timeindex.append(self._max_ts, self._last_batch_base)

    def flush(self) -> None:
        """Make the ``.log`` durable (fdatasync). Indexes are not synced: they are rebuildable."""
        try:
            os.fdatasync(self.fd)
        except OSError as e:
            raise KafkaStorageError(f"{self.log_path}: fdatasync failed: {e}") from e

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= ``offset`` (a batch containing ``offset`` goes
        entirely, so ``next_offset`` may end below ``offset``). Returns the bytes removed."""
        found = self._chain.locate(offset)
        if found is None:
            return 0
        # an offset inside a damaged region: the cut goes where the damage starts
        pos, base = (found.position, found.first_offset) if isinstance(found, Damage) else (found[0], found[1].base_offset)
        removed = self._size - pos
        try:
            os.ftruncate(self.fd, pos)
        except OSError as e:
            raise KafkaStorageError(f"{self.log_path}: truncate to {pos} failed: {e}") from e
        self.index.truncate_to_position(pos)
        self.timeindex.truncate_to_offset(base)
        self._chain.damage.drop_from(pos)
        self._load_tail()
        return removed

    # -- recovery ----------------------------------------------------------------------------

    def recover(self, *, from_start: bool = False) -> int:
        """CRC-check batches from the last index entry (or, with ``from_start``, from position 0,
        rebuilding both indexes) to the end; cut the ``.log`` at the first torn or corrupt batch
        (warning logged). An index that disagrees with the ``.log`` triggers a full rebuild.
        Returns the number of bytes cut."""
        if from_start:
            self.index.reset()
            self.timeindex.reset()
        try:
            return self._load_tail()
        except IndexDamaged as e:
            log.warning("segment %s: %s; rebuilding its indexes", self.log_path, e)
            self.index.reset()
            self.timeindex.reset()
            return self._load_tail()

    def _load_tail(self) -> int:
        file_size = os.fstat(self.fd).st_size
        truncated = 0
        while True:
            entry = self.index.last_entry
            start_off, start_pos = entry if entry is not None else (self.base_offset, 0)
            self._size, self._next_offset = start_pos, start_off
            self._bytes_since_index = 0
            self._max_ts = self.timeindex.last_timestamp
            self._last_batch_base = -1
            self._chain.forget_from(start_pos, start_off)
            end = start_pos
            for pos, h in self._scan(start_pos, file_size):
                if pos == start_pos and entry is not None and h.base_offset != start_off:
                    raise IndexDamaged(f"index entry says offset {start_off} at {pos}, batch there has {h.base_offset}")
                if h.base_offset < self._next_offset:
                    break  # offsets must increase: what follows is not ours
                self._note(pos, h)
                end = pos + h.size
            if entry is not None and end == start_pos:
                raise IndexDamaged(f"no valid batch at the last index entry (offset {start_off}, position {start_pos})")
            damaged = end < file_size and not self.active
            if damaged:
                # fsynced when the log rolled past it: damage, not a torn write; never cut
                self._size = file_size
                self._chain.add_damage(end, self._next_offset, why_unreadable(self.fd, end, file_size, self._next_offset))
            elif end < file_size:
                log.warning(
                    "segment %s: cut %d bytes of torn or corrupt data at position %d; log now ends at offset %d",
                    self.log_path, file_size - end, end, self._next_offset,
                )
                try:
                    os.ftruncate(self.fd, end)
                except OSError as e:
                    raise KafkaStorageError(f"{self.log_path}: truncate to {end} failed: {e}") from e
                truncated += file_size - end
                file_size = end
            stale = self.timeindex.last_offset
            if stale is not None and stale >= self._next_offset:
                if not truncated and not damaged:
                    raise IndexDamaged(f"time index names offset {stale}, log ends at {self._next_offset}")
                self.timeindex.truncate_to_offset(self._next_offset)
                continue  # re-seed the running max timestamp from the shortened time index
            return truncated

    def _scan(self, pos: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Batches from ``pos`` to ``end`` with CRC verified; stops at the first invalid one."""
        fd = self.fd
        while end - pos >= BATCH_HEADER_SIZE:
            buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
            consumed = 0
            for p, h in iter_batches(buf, 0, verify_crc=True):
                yield pos + p, h
                consumed = p + h.size
            if consumed == 0:
                # The batch at pos is invalid, or larger than the chunk: check it piecewise.
                h = self._check_large_batch(buf, pos, end)
                if h is None:
                    return
                yield pos, h
                consumed = h.size
            pos += consumed

    def _check_large_batch(self, head: bytes, pos: int, end: int) -> BatchHeader | None:
        try:
            h = parse_header(head)
        except KafkaError:
            return None
        if h.size <= len(head) or pos + h.size > end or h.last_offset_delta < 0 or h.records_count < 0:
            return None
        crc = _crc32c.crc32c(memoryview(head)[CRC_START:])
        at = pos + len(head)
        while at < pos + h.size:
            piece = os.pread(self.fd, min(_SCAN_CHUNK, pos + h.size - at), at)
            if not piece:
                return None
            crc = _crc32c.crc32c(piece, crc)
            at += len(piece)
        return h if crc == h.crc else None

    # -- reading -----------------------------------------------------------------------------

    def headers(self, pos: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of consecutive sound batches from ``pos`` (a batch boundary) up
        to ``end`` (default: the segment size), reading only headers through a small buffer.
        Stops before a damaged region (recording it if it is new)."""
        end = self._size if end is None else min(end, self._size)
        for p, h in self._chain.walk(pos, None):
            if p >= end:
                return
            yield p, h

    def readable_batches(self, from_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """Every sound batch whose last offset >= ``from_offset``, in order, stepping over damaged
        regions (each logged once when found). For loaders and rebuilds; never raises for damage."""
        return self._chain.readable_batches(from_offset)

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= ``offset``, or None.
        Raises CorruptMessage when ``offset`` lies in a damaged region."""
        found = self._chain.locate(offset)
        if isinstance(found, Damage):
            raise CorruptMessage(f"{self.log_path}: offset {offset} cannot be read: {found.describe()}")
        return found

    def boundary_at_or_before(self, start: int, limit: int) -> int:
        """The largest batch boundary ``b`` with ``start <= b <= limit`` (``start`` is one) such
        that every batch between them is sound."""
        limit = min(limit, self._chain.readable_end(start, limit))
        if limit >= self._size:
            return self._size
        _, pos = self.index.lookup_position(limit)
        best = max(pos, start)
        for p, h in self._chain.walk(best, None):
            if p + h.size > limit:
                break
            best = p + h.size
        return best

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> tuple[int, int] | None:
        """The file range of whole batches starting with the one containing ``offset``: only
        batches whose last offset < ``max_offset``, at most ``max_bytes`` unless
        ``min_one_batch`` and the first batch alone is larger, and never past a damaged region.
        Returns ``(position, length)`` (length 0 when the first batch is not readable under the
        limits), or None when no batch of this segment has an offset >= ``offset``. Raises
        CorruptMessage when ``offset`` lies in a damaged region."""
        found = self.find_batch(offset)
        if found is None:
            return None
        pos, h = found
        if h.last_offset >= max_offset:
            return pos, 0
        limit = self._size
        if max_offset < self._next_offset:
            stop = self._chain.locate(max_offset)
            if isinstance(stop, Damage):
                limit = stop.position
            elif stop is not None:
                limit = stop[0]
        want = min(limit, pos + max(max_bytes, h.size if min_one_batch else 0))
        limit = min(limit, self._chain.readable_end(pos, want))
        if limit - pos <= max_bytes:
            return pos, limit - pos
        end = self.boundary_at_or_before(pos, pos + max_bytes)
        if end == pos and min_one_batch:
            end = pos + h.size
        return pos, end - pos

    def find_timestamp(self, ts: int, min_offset: int) -> tuple[int, BatchHeader] | None:
        """The first sound batch with max timestamp >= ``ts`` and last offset >= ``min_offset``."""
        if self._max_ts < ts:
            return None
        before = self.timeindex.lookup_before(ts)
        for pos, h in self._chain.readable_batches(max(before if before is not None else self.base_offset, min_offset)):
            if h.max_timestamp >= ts:
                return pos, h
        return None

    def read_bytes(self, position: int, length: int) -> bytes:
        """Copy ``length`` bytes at ``position`` into Python (ListOffsets refinement, tests)."""
        return os.pread(self.fd, length, position)

    # -- lifecycle ---------------------------------------------------------------------------

    def _paths(self) -> list[Path]:
        stem = self.directory / segment_stem(self.base_offset)
        suffix = DELETED_SUFFIX if self._deleted else ""
        return [Path(f"{stem}{ext}{suffix}") for ext in (".log", ".index", ".timeindex")]

    def rename_to_deleted(self) -> None:
        """Rename the files to ``*.deleted`` and close the indexes; ``fd`` stays open for readers
        until ``close``. Idempotent."""
        if self._deleted:
            return
        self.index.close()
        self.timeindex.close()
        for p in self._paths():
            try:
                os.rename(p, f"{p}{DELETED_SUFFIX}")
            except FileNotFoundError:
                pass
        self._deleted = True

    def close(self) -> None:
        """Close every descriptor. Idempotent."""
        self.index.close()
        self.timeindex.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        """Close and remove the files now (whatever their current names)."""
        self.close()
        for p in self._paths():
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self._next_offset}, size={self._size})"

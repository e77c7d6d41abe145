"""The two sparse index files of a segment: ``.index`` (offset -> position) and ``.timeindex``.

Theory of operation. Both files are *derived data*: everything in them can be recomputed from the
segment's ``.log``. They are therefore never fsynced; ``LogSegment`` validates them when it opens a
segment and rebuilds them from the ``.log`` when they are missing or fail validation. Each class
keeps its entries in memory (``array``: 8 or 12 bytes per entry, one entry per
``index.interval.bytes`` of log, about 0.2% of the log size) and appends each new entry to its file
with one ``os.write``, so after a kill -9 the file holds every entry the process made.

Entry semantics (oncelog's, not byte-identical to Kafka's):

- ``OffsetIndex``: ``(relative offset uint32, position uint32)``, big endian. Each entry is the
  *base offset* and start position of a batch in the ``.log``; entries strictly increase in both.
- ``TimeIndex``: ``(timestamp int64, relative offset uint32)``. An entry ``(T, O)`` says: the
  largest batch max-timestamp of all batches up to and including the batch whose base offset is
  ``O`` is ``T``. Entries strictly increase in both fields, so binary search works although record
  timestamps need not be monotonic.

Neither class is thread-safe: a partition's log is driven from one thread (the broker's loop).
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

__all__ = ["OffsetIndex", "TimeIndex", "IndexDamaged"]

log = logging.getLogger(__name__)


class IndexDamaged(Exception):
    """An index file failed validation (internal: LogSegment answers by rebuilding it)."""


def _read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def _columns(data: bytes, fmt: str, typecodes: str) -> list[array]:
    """Split big-endian fixed-size entries (struct ``fmt``) into one array per field."""
    cols = [array(t) for t in typecodes]
    if data:
        for col, values in zip(cols, zip(*struct.iter_unpack(fmt, data))):
            col.extend(values)
    return cols


def _strictly_increasing(col: array) -> bool:
    return all(a < b for a, b in zip(col, col[1:]))


class OffsetIndex:
    """``<base>.index``: sparse map from batch base offset to its byte position in the ``.log``.

    Guarantees: in memory and in the file, entries strictly increase in offset and position, each
    names the start of a batch whose base offset it holds (LogSegment maintains this). Not
    durable (never fsynced); ``load`` rejects a file that is not a whole number of entries, not
    monotonic, or points at or beyond the end of the log.
    """

    ENTRY_SIZE = 8

    def __init__(self, path: Path, base_offset: int, rel: array, pos: array) -> None:
        self.path = path
        self.base_offset = base_offset
        self._rel = rel  # relative offsets, 'I'
        self._pos = pos  # positions, 'I'
        self._fd = _open_append(path)

    @classmethod
    def create(cls, path: Path, base_offset: int) -> OffsetIndex:
        """A new, empty index (an existing file is emptied)."""
        with open(path, "wb"):
            pass
        return cls(path, base_offset, array("I"), array("I"))

    @classmethod
    def load(cls, path: Path, base_offset: int, *, log_size: int) -> OffsetIndex:
        """Open and validate an existing index. Raises IndexDamaged (missing file included)."""
        data = _read_file(path)
        if data is None:
            raise IndexDamaged(f"{path.name} missing")
        if len(data) % cls.ENTRY_SIZE:
            raise IndexDamaged(f"{path.name}: size {len(data)} not a multiple of {cls.ENTRY_SIZE}")
        rel, pos = _columns(data, ">II", "II")
        if not (_strictly_increasing(rel) and _strictly_increasing(pos)):
            raise IndexDamaged(f"{path.name}: entries not strictly increasing")
        if pos and pos[-1] >= log_size:
            raise IndexDamaged(f"{path.name}: last entry at position {pos[-1]}, log has {log_size} bytes")
        return cls(path, base_offset, rel, pos)

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(offset, position) of the last entry, or None when empty."""
        if not self._rel:
            return None
        return self.base_offset + self._rel[-1], self._pos[-1]

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offset and position must exceed the last entry's (ValueError: a bug)."""
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(f"{self.path.name}: entry ({offset}, {position}) does not follow {self.last_entry}")
        self._rel.append(rel)  # OverflowError past uint32: the log rolls long before
        self._pos.append(position)
        os.write(self._fd, rel.to_bytes(4, "big") + position.to_bytes(4, "big"))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose offset <= ``offset``; (base, 0) if none."""
        i = bisect_right(self._rel, offset - self.base_offset) - 1 if offset >= self.base_offset else -1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose position <= ``position``; (base, 0) if none."""
        i = bisect_right(self._pos, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def next_entry(self, position: int) -> tuple[int, int] | None:
        """(offset, position) of the first entry whose position >= ``position``; None if none."""
        i = bisect_left(self._pos, position)
        if i == len(self._pos):
            return None
        return self.base_offset + self._rel[i], self._pos[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry whose position >= ``position``."""
        keep = bisect_left(self._pos, position)
        if keep < len(self._pos):
            del self._rel[keep:]
            del self._pos[keep:]
            os.ftruncate(self._fd, keep * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        del self._rel[:]
        del self._pos[:]
        os.ftruncate(self._fd, 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class TimeIndex:
    """``<base>.timeindex``: sparse, monotonic (max timestamp so far, batch base offset) pairs.

    Guarantees: entries strictly increase in timestamp and offset; entry ``(T, O)`` means every
    batch up to and including the one based at ``O`` has max timestamp <= T, and one of them has
    exactly T. Not durable (never fsynced); rebuilt from the log when ``load`` rejects it.
    """

    ENTRY_SIZE = 12

    def __init__(self, path: Path, base_offset: int, ts: array, rel: array) -> None:
        self.path = path
        self.base_offset = base_offset
        self._ts = ts  # 'q'
        self._rel = rel  # 'I'
        self._fd = _open_append(path)

    @classmethod
    def create(cls, path: Path, base_offset: int) -> TimeIndex:
        with open(path, "wb"):
            pass
        return cls(path, base_offset, array("q"), array("I"))

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex:
        """Open and validate an existing time index. Raises IndexDamaged (missing included).
        Whether the entries lie within the log is checked by the segment once it knows its end."""
        data = _read_file(path)
        if data is None:
            raise IndexDamaged(f"{path.name} missing")
        if len(data) % cls.ENTRY_SIZE:
            raise IndexDamaged(f"{path.name}: size {len(data)} not a multiple of {cls.ENTRY_SIZE}")
        ts, rel = _columns(data, ">qI", "qI")
        if not (_strictly_increasing(ts) and _strictly_increasing(rel)):
            raise IndexDamaged(f"{path.name}: entries not strictly increasing")
        return cls(path, base_offset, ts, rel)

    def __len__(self) -> int:
        return len(self._ts)

    @property
    def last_timestamp(self) -> int:
        """Timestamp of the last entry, -1 when empty."""
        return self._ts[-1] if self._ts else -1

    @property
    def last_offset(self) -> int | None:
        return self.base_offset + self._rel[-1] if self._rel else None

    def append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)``; both must exceed the last entry's (ValueError: a bug)."""
        rel = offset - self.base_offset
        if self._ts and (timestamp <= self._ts[-1] or rel <= self._rel[-1]):
            raise ValueError(f"{self.path.name}: entry ({timestamp}, {offset}) does not follow the last one")
        self._ts.append(timestamp)
        self._rel.append(rel)
        os.write(self._fd, timestamp.to_bytes(8, "big", signed=True) + rel.to_bytes(4, "big"))

    def lookup_before(self, timestamp: int) -> int | None:
        """Base offset of the batch of the last entry whose timestamp < ``timestamp``: every batch
        up to and including it has max timestamp < ``timestamp``. None if there is none."""
        i = bisect_left(self._ts, timestamp) - 1
        return None if i < 0 else self.base_offset + self._rel[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every entry whose offset >= ``offset``."""
        keep = bisect_left(self._rel, offset - self.base_offset) if offset >= self.base_offset else 0
        if keep < len(self._rel):
            del self._ts[keep:]
            del self._rel[keep:]
            os.ftruncate(self._fd, keep * self.ENTRY_SIZE)

    def reset(self) -> None:
        del self._ts[:]
        del self._rel[:]
        os.ftruncate(self._fd, 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

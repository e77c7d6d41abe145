"""The aborted-transaction index of one partition (``aborted.txnindex``) (R15).

Every ABORT marker appended to the partition adds one entry: the producer id, the first offset of
the aborted transaction on this partition, the offset of the marker (last offset), and the last
stable offset just before the marker was written. read_committed fetches return the entries that
overlap the fetched range, so that clients drop the aborted records they receive.

Theory of operation. Entries are appended in marker order, so ``last_offset`` increases along the
list, and ``lso_before`` never decreases (the LSO only moves forward) and never exceeds the entry's
``first_offset`` (the transaction was open, so the LSO could not pass its first offset). A query
for ``[start, upper)`` therefore starts at the first entry whose last offset >= start and stops at
the first entry whose ``lso_before`` >= upper: no later entry can begin below ``upper``.

One file per partition (Kafka keeps one per segment; a single file is simpler and the entries are
small): fixed 34-byte records (version int16, pid int64, first int64, last int64, lso int64),
appended with one write, never fsynced — like the offset indexes it is derived data, and
``Partition.open`` re-derives the entries of the log it replays. On open, entries at or beyond the
log end (a torn tail was cut) are dropped; a missing, torn or inconsistent file sets ``damaged``
and the partition rebuilds the index from the whole log (so does a file whose newest entry is
older than the one the last producer snapshot recorded: entries were lost). ``trim_below``
forgets entries wholly below the log start offset (retention) and compacts the file.

Not thread-safe; used from the broker's event loop only.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path
from typing import NamedTuple


FILE_NAME = "aborted.txnindex"
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    lso_before: int


class AbortedTxnIndex:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []
        #: set by ``open`` when the file was missing, torn or inconsistent: the caller rebuilds
        self.damaged = False

    @classmethod
    def open(cls, directory: Path, log_start: int, log_end: int) -> "AbortedTxnIndex":
        self = cls(directory)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
            self.damaged = log_end > log_start  # a log with data always has its index file
        whole = len(data) - len(data) % _ENTRY.size
        if whole != len(data):
            self.damaged = True
        kept = []
        for off in range(0, whole, _ENTRY.size):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, off)
            if version != _VERSION or last < first or (kept and last <= kept[-1].last_offset):
                self.damaged = True
                break
            if last >= log_end:
                break
            if last >= log_start:
                kept.append(AbortedTxn(pid, first, last, lso))
        self.entries = kept
        self._lasts = [e.last_offset for e in kept]
        if not self.path.exists() or whole != len(data) or len(kept) * _ENTRY.size != len(data):
            self._rewrite()
        return self

    def reset(self) -> None:
        """Forget every entry (before a rebuild from the log)."""
        self.entries, self._lasts = [], []
        self._rewrite()

    @property
    def last_offset(self) -> int:
        """Marker offset of the newest entry, -1 when empty."""
        return self._lasts[-1] if self._lasts else -1

    def append(self, entry: AbortedTxn) -> None:
        if self._lasts and entry.last_offset <= self._lasts[-1]:
            return  # already indexed (a replay of a marker that is in the file)
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, _ENTRY.pack(_VERSION, *entry))
        finally:
            os.close(fd)

    def collect(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, upper)."""
        out = []
        i = bisect.bisect_left(self._lasts, start)
        for e in self.entries[i:]:
            if e.lso_before >= upper:
                break
            if e.first_offset < upper:
                out.append(e)
        return out

    def trim_below(self, log_start: int) -> None:
        i = bisect.bisect_left(self._lasts, log_start)
        if i:
            del self.entries[:i]
            del self._lasts[:i]
            self._rewrite()

    def truncate_from(self, offset: int) -> None:
        """Forget entries whose marker is at or after ``offset`` (log truncation)."""
        i = bisect.bisect_left(self._lasts, offset)
        if i < len(self.entries):
            del self.entries[i:]
            del self._lasts[i:]
            self._rewrite()

    def _rewrite(self) -> None:
        # Derived data: replaced atomically (rename) but not fsynced; a loss is detected on open
        # (see the module docstring) and repaired by a rebuild.
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(_ENTRY.pack(_VERSION, *e) for e in self.entries))
        os.replace(tmp, self.path)

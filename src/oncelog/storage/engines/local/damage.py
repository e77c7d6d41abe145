"""What a segment knows about the soundness of its ``.log``: damaged regions and checked runs.

Theory of operation (R1, R22). A segment's ``.log`` is a chain of batches: each header says how
long its batch is, and so where the next one starts. Recovery cuts the *active* segment at the
first torn or corrupt batch of its tail: those bytes were being written when the broker died and
were never acknowledged. An *inactive* segment was fsynced when the log rolled past it, so bytes
that cannot be walked there are bit rot or outside damage, and cutting the file would destroy
acknowledged batches after them. Such bytes are recorded instead, as a ``Damage``: a region of
the file from the batch boundary where the walk broke to the next position known to start a
sound batch (the next offset-index entry whose header is sound and names the entry's offset),
or to the end of the segment when there is none. Nothing on disk changes.

Readers serve every batch before a damaged region, answer CORRUPT_MESSAGE for offsets inside it
(Kafka raises CorruptRecordException there, which its Fetch path answers with that code), and
resume after it; loaders of internal topics skip it. The bytes of a region are never sent.

A header is *sound* when its magic is 2, its length is at least a batch header and stays inside
the file, its counts are not negative, its base offset is not below the offset the walk expects,
and it agrees with the offset index (it does not straddle a position where the index says a batch
starts, and at such a position it carries the indexed offset). CRCs are not checked on reads, as in
Kafka: clients check them.

``CheckedRuns`` remembers which byte ranges have been walked and found sound, so that each byte
is walked at most once per process: bytes appended since the segment was opened, and its tail
that recovery CRC-checked, are checked from the start; older bytes are walked the first time a
read needs them. A read never returns bytes outside a checked run.

Not thread-safe: owned by one ``LogSegment``.
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from oncelog.protocol.records import BATCH_HEADER_SIZE, MAGIC, BatchHeader, parse_header
from oncelog.storage.engines.local.index import OffsetIndex

__all__ = ["CheckedRuns", "Damage", "DamageMap", "resume_point", "unsound", "unsound_prefix", "why_unreadable"]


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes ``[position, resume_position)`` of a ``.log`` that cannot be read as batches.

    ``first_offset`` is the offset after the last sound batch before the region: offsets from it
    up to ``resume_offset`` (exclusive) cannot be served. ``resume_offset`` None means the region
    runs to the end of the segment (``resume_position`` is then the file size): every offset from
    ``first_offset`` below the next segment's base is lost to readers.
    """

    position: int
    first_offset: int
    resume_position: int
    resume_offset: int | None
    reason: str

    def covers(self, offset: int) -> bool:
        return offset >= self.first_offset and (self.resume_offset is None or offset < self.resume_offset)

    def describe(self) -> str:
        """One sentence for log lines: where, what, which offsets, where reads resume."""
        if self.resume_offset is None:
            lost = f"offsets from {self.first_offset} to the end of the segment"
            resume = "reads resume in the next segment"
        else:
            lost = f"offsets {self.first_offset}..{self.resume_offset - 1}"
            resume = f"reads resume at offset {self.resume_offset} (position {self.resume_position})"
        return (f"damaged at position {self.position}: {self.reason}; {lost} (bytes {self.position}.."
                f"{self.resume_position}) cannot be read; {resume}")


class DamageMap:
    """The damaged regions of one segment: disjoint, sorted by position."""

    def __init__(self) -> None:
        self._regions: list[Damage] = []

    def __bool__(self) -> bool:
        return bool(self._regions)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._regions)

    def add(self, d: Damage) -> None:
        i = bisect_left([r.position for r in self._regions], d.position)
        self._regions.insert(i, d)

    def at(self, position: int) -> Damage | None:
        """The region starting exactly at ``position``."""
        for d in self._regions:
            if d.position == position:
                return d
        return None

    def next_from(self, position: int) -> Damage | None:
        """The first region that ends after ``position`` (it may contain it)."""
        for d in self._regions:
            if d.resume_position > position or d.resume_offset is None:
                return d
        return None

    def covering(self, offset: int) -> Damage | None:
        for d in self._regions:
            if d.covers(offset):
                return d
        return None

    @property
    def open_ended(self) -> Damage | None:
        """The region that runs to the end of the segment, if any (always the last one)."""
        return self._regions[-1] if self._regions and self._regions[-1].resume_offset is None else None

    def close_open_ended(self, position: int, offset: int) -> None:
        """A batch based at ``offset`` was appended at ``position``, after an open-ended region:
        reads resume there."""
        d = self.open_ended
        if d is not None:
            self._regions[-1] = Damage(d.position, d.first_offset, position, offset, d.reason)

    def drop_from(self, position: int) -> None:
        """Forget the regions at or after ``position`` (the file was cut there)."""
        self._regions = [d for d in self._regions if d.position < position]


class CheckedRuns:
    """Byte ranges walked and found sound: disjoint, sorted runs ``[start, end)``, each with the
    offset expected at its end. Adjacent runs merge. Appending right after the last run, the
    common case, is O(1)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._nexts: list[int] = []
        self._hint = 0  # the run the last add touched: walks and appends extend it batch by batch

    def add(self, start: int, end: int, next_offset: int) -> None:
        if start >= end:
            return
        s, e, n = self._starts, self._ends, self._nexts
        i = self._hint
        if i < len(s) and s[i] <= start <= e[i] and (i + 1 == len(s) or end < s[i + 1]):
            if end >= e[i]:  # the common case: extends the run it touched last
                e[i], n[i] = end, next_offset
            return
        i = bisect_left(e, start)  # first run that ends at or after start: may touch or overlap
        j = bisect_right(s, end)  # runs before j start at or before end
        if i < j:  # merge runs i..j-1 with [start, end)
            new_start = min(start, s[i])
            if e[j - 1] > end:
                end, next_offset = e[j - 1], n[j - 1]
            s[i:j], e[i:j], n[i:j] = [new_start], [end], [next_offset]
        else:
            s.insert(i, start)
            e.insert(i, end)
            n.insert(i, next_offset)
        self._hint = i

    def next_start(self, position: int) -> int:
        """Start of the first run that starts after ``position`` (a large number if none)."""
        i = bisect_right(self._starts, position)
        return self._starts[i] if i < len(self._starts) else 1 << 62

    def run_at(self, position: int) -> tuple[int, int] | None:
        """(end, offset expected at end) of the run containing ``position`` (start <= position <
        end), or None."""
        i = bisect_right(self._starts, position) - 1
        if i >= 0 and position < self._ends[i]:
            return self._ends[i], self._nexts[i]
        return None

    def next_at_end(self, position: int) -> int | None:
        """The offset expected at ``position`` if a run ends exactly there."""
        i = bisect_left(self._ends, position)
        if i < len(self._ends) and self._ends[i] == position:
            return self._nexts[i]
        return None

    def drop_from(self, position: int, next_offset: int) -> None:
        """Forget everything at or after ``position`` (the file was cut there, at a batch
        boundary; ``next_offset`` is the offset expected there now)."""
        i = bisect_left(self._ends, position)
        if i < len(self._ends) and self._starts[i] < position:
            self._ends[i], self._nexts[i] = position, next_offset
            i += 1
        del self._starts[i:], self._ends[i:], self._nexts[i:]
        self._hint = 0

    def reset(self) -> None:
        self._starts, self._ends, self._nexts, self._hint = [], [], [], 0


def unsound_prefix(buf: bytes, off: int, position: int, file_size: int) -> str | None:
    """Why the bytes at ``buf[off:]`` (file position ``position``) cannot even be parsed as a
    batch header, or None."""
    if len(buf) - off < BATCH_HEADER_SIZE:
        return f"{file_size - position} bytes left at the end of the file, fewer than a batch header"
    if buf[off + 16] != MAGIC:
        return f"magic byte {buf[off + 16]}, 2 expected"
    return None


def unsound(h: BatchHeader, position: int, file_size: int, expect: int | None,
            entry: tuple[int, int] | None) -> str | None:
    """Why the header ``h`` read at ``position`` cannot be trusted, or None when it is sound.
    ``expect``: the lowest base offset it may have (None: not checked); ``entry``: the first
    offset-index entry (offset, position) at or after ``position``, if any."""
    size = h.batch_length + 12
    if size < BATCH_HEADER_SIZE:
        return f"batch length {h.batch_length} is below the minimum {BATCH_HEADER_SIZE - 12}"
    if position + size > file_size:
        return f"batch of {size} bytes runs past the end of the {file_size}-byte file"
    if h.last_offset_delta < 0 or h.records_count < 0:
        return f"negative counts (last offset delta {h.last_offset_delta}, records {h.records_count})"
    if expect is not None and h.base_offset < expect:
        return f"base offset {h.base_offset} is below {expect}, the offset after the previous batch"
    if entry is not None:
        e_offset, e_position = entry
        if e_position == position and h.base_offset != e_offset:
            return f"the offset index places offset {e_offset} here, the header says {h.base_offset}"
        if position < e_position < position + size:
            return f"batch of {size} bytes straddles position {e_position}, where the offset index places a batch"
    return None


def resume_point(fd: int, index: OffsetIndex, position: int, first_offset: int, file_size: int) -> tuple[int, int | None]:
    """Where reads resume after damage at ``position``: (position, offset) of the first
    offset-index entry after it whose batch header is sound and carries the entry's offset;
    (file size, None) when there is none."""
    entry = index.next_entry(position + 1)
    while entry is not None:
        offset, pos = entry
        if offset >= first_offset:
            buf = os.pread(fd, BATCH_HEADER_SIZE, pos)
            if unsound_prefix(buf, 0, pos, file_size) is None:
                h = parse_header(buf)
                if h.base_offset == offset and unsound(h, pos, file_size, first_offset, None) is None:
                    return pos, offset
        entry = index.next_entry(pos + 1)
    return max(file_size, position), None


def why_unreadable(fd: int, pos: int, file_size: int, expect: int) -> str:
    """A reason for the batch at ``pos`` failing a recovery scan (whose checks include the CRC),
    for the damage log line."""
    buf = os.pread(fd, BATCH_HEADER_SIZE, pos)
    reason = unsound_prefix(buf, 0, pos, file_size)
    if reason is None:
        reason = unsound(parse_header(buf), pos, file_size, expect, None)
    return reason or "the batch there fails its CRC32C check"

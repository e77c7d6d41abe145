"""The header chain of one segment's ``.log``: walking it, checking it, and what was learnt.

A ``.log`` is a chain of batches: each header says how long its batch is, so where the next one
starts. Every read of a segment goes through here. ``walk`` yields the sound batches from a batch
boundary (headers only; damage.py says what sound means) and ``check`` does the same without
yielding, for ranges a read is about to return; both stop at a damaged region, and record a new
one (logged once, with the file, the position and the offsets it costs) when they meet it.
``locate`` finds the batch holding an offset, or the damaged region covering it;
``readable_end`` bounds a read to checked bytes; ``readable_batches`` steps over damage for
loaders and rebuilds.

What was checked is remembered (``CheckedRuns``), so each byte is walked at most once per
process, and damage once found is never walked into again (``DamageMap``). The segment owns one
``HeaderChain`` and tells it when its file is cut (``forget_from``).

Cost: the first read of data written before the broker started pays for checking its headers
once (docs/RELIABILITY.md has the figures); later reads, and reads of data appended since the
start, check nothing.

Not thread-safe: used from the segment's thread only.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from oncelog.protocol.records import BATCH_HEADER_SIZE, MAGIC, BatchHeader, parse_header
from oncelog.storage.engines.local.damage import CheckedRuns, Damage, DamageMap, resume_point, unsound, unsound_prefix
from oncelog.storage.engines.local.index import OffsetIndex

__all__ = ["ChainedSegment", "HeaderChain"]

log = logging.getLogger(__name__)

_WALK_READ = 16384  # walks over small batches: one pread serves every header within it
_HEADER = struct.Struct(">qiibIhiqqqhii")  # records.py's batch header layout (BatchHeader fields)
_CHAIN = struct.Struct(">qi4xb6xi30xi")  # base offset, length, magic, last offset delta, records count
assert _HEADER.size == _CHAIN.size == BATCH_HEADER_SIZE


class ChainedSegment(Protocol):
    """What a chain reads of its segment (segment.py's ``LogSegment``), afresh at every call."""

    fd: int
    index: OffsetIndex
    base_offset: int

    @property
    def size(self) -> int: ...

    @property
    def next_offset(self) -> int: ...

    @property
    def log_path(self) -> Path: ...


class HeaderChain:
    """See the module docstring."""

    def __init__(self, seg: ChainedSegment) -> None:
        self.seg = seg
        self.damage = DamageMap()
        self.checked = CheckedRuns()
        self.reported: set[int] = set()  # positions of damage already logged

    def forget_from(self, position: int, next_offset: int) -> None:
        """The file was cut at the batch boundary ``position``; ``next_offset`` is expected there."""
        self.damage.drop_from(position)
        self.checked.drop_from(position, next_offset)

    def walk(self, pos: int, expect: int | None) -> Iterator[tuple[int, BatchHeader]]:
        """Sound batches from the batch boundary ``pos`` on, reading headers only (damage.py
        says what sound means). ``expect``: the offset the batch at ``pos`` starts at or after
        (None: what the checked runs or the index say about ``pos``). Stops at the end of the
        ``.log``, before a known damaged region, or at the first unsound header, which it records
        as a new damaged region (logged once). The batches it yields are marked checked when the
        walk ends (or its caller drops it).

        The hot loop of a first read of old data: the common checks are inlined, headers come
        from one pread per ``_WALK_READ`` bytes of small batches, or one 61-byte pread per batch
        when batches are larger than that."""
        file_size = self.seg.size
        d = self.damage.next_from(pos)
        limit = file_size if d is None else min(file_size, max(d.position, pos))
        if expect is None:
            expect = self._expected_at(pos)
        low = -1 if expect is None else expect
        entry = self.seg.index.next_entry(pos)
        e_off, e_pos = entry if entry is not None else (-1, -1)
        fd, buf, buf_start, blen, read_size = self.seg.fd, b"", 0, 0, _WALK_READ
        unpack, make = _HEADER.unpack_from, BatchHeader._make
        run_start = pos
        try:
            while pos < limit:
                off = pos - buf_start
                if off < 0 or off + BATCH_HEADER_SIZE > blen:
                    buf, buf_start, off = os.pread(fd, read_size, pos), pos, 0
                    blen = len(buf)
                h = None
                if blen - off >= BATCH_HEADER_SIZE and buf[off + 16] == MAGIC:
                    h = make(unpack(buf, off))
                    size = h.batch_length + 12
                    if not (
                        size >= BATCH_HEADER_SIZE and pos + size <= file_size and h.last_offset_delta >= 0
                        and h.records_count >= 0 and h.base_offset >= low
                        and (e_pos < pos or (e_pos > pos and pos + size <= e_pos) or (e_pos == pos and h.base_offset == e_off))
                    ):
                        h = None
                if h is None:
                    reason = unsound_prefix(buf, off, pos, file_size)
                    if reason is None:
                        reason = unsound(parse_header(buf, off), pos, file_size, expect, entry)
                    self.add_damage(pos, expect, reason or "unreadable header")
                    return
                yield pos, h
                expect = low = h.base_offset + h.last_offset_delta + 1
                read_size = _WALK_READ if size <= _WALK_READ // 4 else BATCH_HEADER_SIZE
                pos += size
                if 0 <= e_pos < pos:
                    entry = self.seg.index.next_entry(pos)
                    e_off, e_pos = entry if entry is not None else (-1, -1)
        finally:
            # everything yielded is sound (also when the caller stopped early: pos is then the
            # end of the last batch it was given, or that batch's start if it broke on it)
            if expect is not None and pos > run_start:
                self.checked.add(run_start, pos, expect)

    def _expected_at(self, pos: int) -> int | None:
        nxt = self.checked.next_at_end(pos)
        if nxt is not None:
            return nxt
        entry = self.seg.index.next_entry(pos)
        if entry is not None and entry[1] == pos:
            return entry[0]
        return self.seg.base_offset if pos == 0 else None

    def add_damage(self, position: int, first_offset: int | None, reason: str) -> Damage:
        """Record (and log, once) the damaged region starting at ``position``."""
        if first_offset is None:  # a walk from an unknown position: the index's best guess
            first_offset = self.seg.index.lookup_position(position)[0]
        resume_position, resume_offset = resume_point(self.seg.fd, self.seg.index, position, first_offset, self.seg.size)
        d = Damage(position, first_offset, resume_position, resume_offset, reason)
        self.damage.add(d)
        if position not in self.reported:
            self.reported.add(position)
            log.warning("%s: %s", self.seg.log_path, d.describe())
        return d

    def readable_end(self, pos: int, want: int) -> int:
        """Check (once) the unchecked headers between the batch boundary ``pos`` and ``want``:
        returns ``want`` or more if everything up to it is sound, else the position of the first
        damaged region after ``pos``."""
        want = min(want, self.seg.size)
        end, nxt = pos, None
        while end < want:
            run = self.checked.run_at(end)
            if run is not None:
                end, nxt = run
                continue
            stop, nxt = self.check(end, min(want, self.checked.next_start(end)), nxt)
            if stop == end:
                return end  # damage at ``end`` (just found, or known)
            end = stop
        return end

    def check(self, pos: int, upto: int, expect: int | None) -> tuple[int, int | None]:
        """What ``walk`` checks, without making a header object per batch (the first read of old
        data pays this once per batch; it costs about two thirds of a walk): walk from the batch boundary
        ``pos`` until ``upto`` or beyond, the end of the ``.log`` or a damaged region (recorded
        if new). Marks the walked range checked; returns (where it stopped, the offset expected
        there)."""
        file_size = self.seg.size
        d = self.damage.next_from(pos)
        limit = file_size if d is None else min(file_size, max(d.position, pos))
        if expect is None:
            expect = self._expected_at(pos)
        low = -1 if expect is None else expect
        entry = self.seg.index.next_entry(pos)
        e_off, e_pos = entry if entry is not None else (-1, -1)
        fd, buf, buf_start, blen, read_size = self.seg.fd, b"", 0, 0, _WALK_READ
        unpack = _CHAIN.unpack_from
        start = pos
        while pos < limit and pos < upto:
            off = pos - buf_start
            if off < 0 or off + BATCH_HEADER_SIZE > blen:
                buf, buf_start, off = os.pread(fd, read_size, pos), pos, 0
                blen = len(buf)
            ok = False
            if blen - off >= BATCH_HEADER_SIZE:
                base, length, magic, delta, count = unpack(buf, off)
                size = length + 12
                ok = (magic == MAGIC and size >= BATCH_HEADER_SIZE and pos + size <= file_size and delta >= 0
                      and count >= 0 and base >= low
                      and (e_pos < pos or (e_pos > pos and pos + size <= e_pos) or (e_pos == pos and base == e_off)))
            if not ok:
                self.checked.add(start, pos, low)
                list(self.walk(pos, expect))  # describes and records the damage
                return pos, expect
            expect = low = base + delta + 1
            read_size = _WALK_READ if size <= _WALK_READ // 4 else BATCH_HEADER_SIZE
            pos += size
            if 0 <= e_pos < pos:
                entry = self.seg.index.next_entry(pos)
                e_off, e_pos = entry if entry is not None else (-1, -1)
        if expect is not None:
            self.checked.add(start, pos, expect)
        return pos, expect

    def locate(self, offset: int) -> tuple[int, BatchHeader] | Damage | None:
        """The batch whose last offset is the first >= ``offset`` (position, header), the damaged
        region that covers ``offset``, or None when the segment holds nothing at or after it."""
        if offset >= self.seg.next_offset:
            d = self.damage.open_ended
            return d if d is not None and offset >= d.first_offset else None
        d = self.damage.covering(offset)
        if d is not None:
            return d
        expect, start = self.seg.index.lookup(offset)
        while True:
            stop = start
            for pos, h in self.walk(start, expect):
                if h.last_offset >= offset:
                    return pos, h
                stop = pos + h.size
            d = self.damage.at(stop)
            if d is None:
                return None
            if d.covers(offset) or d.resume_offset is None:
                return d
            if d.resume_position <= start:
                raise AssertionError(f"bug: {self.seg.log_path}: damage at {d.position} resumes at {d.resume_position}")
            start, expect = d.resume_position, d.resume_offset

    def readable_batches(self, from_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """Every sound batch whose last offset >= ``from_offset``, in order, stepping over damaged
        regions (each logged once when found). For loaders and rebuilds; never raises for damage."""
        found = self.locate(from_offset)
        if found is None:
            return
        if isinstance(found, Damage):
            if found.resume_offset is None:
                return
            pos, expect = found.resume_position, found.resume_offset
        else:
            pos, expect = found[0], found[1].base_offset
        while True:
            stop = pos
            for p, h in self.walk(pos, expect):
                yield p, h
                stop, expect = p + h.size, h.next_offset
            d = self.damage.at(stop)
            if d is None or d.resume_offset is None or d.resume_position <= pos:
                return
            pos, expect = d.resume_position, d.resume_offset


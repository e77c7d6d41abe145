"""Log compaction for topics with ``cleanup.policy`` containing ``compact`` (R4); the internal
topics (``__consumer_offsets``, ``__transaction_state``) are compacted.

What a pass keeps, over the *cleanable* range — every segment but the active one, up to the last
stable offset (an open transaction's data is never touched) and older than
min.compaction.lag.ms:

* the last value of every key (a later record with the same key supersedes an earlier one;
  records without a key are kept);
* a tombstone (null value) that is the last record of its key, until its timestamp is
  delete.retention.ms old — long enough for a consumer that is reading to see the deletion;
* no record of an aborted transaction, and an aborted or committed transaction's records never
  supersede anything until its marker is in the cleanable range;
* a control batch (transaction marker) as long as any record of its transaction remains, and then
  until it is delete.retention.ms old (so a read_committed consumer still sees the end of a
  transaction it has read into); a transaction's data never outlives its marker, so the LSO of a
  rebuilt partition is right;
* every producer's last data batch in the range (not a marker: it carries no sequence), if need
  be as an empty batch (its header alone, as Kafka's cleaner does), so the producer state a
  restart rebuilds from the log (without a snapshot) still knows the producer's epoch and last
  sequence (an aborted one thus keeps its header, and with it its marker);

A rewritten batch keeps its base offset, lastOffsetDelta, producer fields and codec, and each
record its offset (records.filter_batch). Cleaning is per record in Python: never on the produce
or fetch path.

The rules are storage/keep_rules.py's ``KeepRules`` (shared with the PostgreSQL engine's
compaction, storage/engines/postgres/log.py); this module is the local engine's side: segments, files, swaps.

Bad data (R22). A batch whose records do not decode (a client wrote it; its header is sound) is
kept as it is and supersedes nothing (``Scan.undecodable``); a marker that does not decode
decides nothing. A segment with a damaged region (storage/engines/local/damage.py) is never rewritten — that
would drop every batch after the damage — and since compaction must start at the log start (a
tombstone dropped after a skipped segment could let an older value of its key resurface), a pass
stops before the first damaged segment. Damage found while building (not yet known to the segment) fails that pass
and is remembered, so later passes stop before that segment too.

Crash safety. A pass rewrites groups of consecutive segments (at most segment.bytes together)
into one new segment each, based at the group's first offset X, built in
``<partition>/cleaner.tmp/`` (fsynced). The swap of a group then is: rename the new files'
directory to ``<X>-<Y>.swap`` (Y: base offset of the segment after the group) — the commit point
— then rename the old segments to ``*.deleted`` and move the new files in (the ``.log`` last).
``recover`` (run before the logs are opened) deletes ``cleaner.tmp`` and completes every
``.swap`` it finds: segment files with a base in [X, Y) go, the new ones move in. A crash thus
leaves the old segments or the new one, never a mix.

Planning and swapping run on the event loop; building (reading the old segments through
duplicated descriptors, writing the new files) may run in a thread: the swap checks that the
planned segments are still the live ones and gives up otherwise.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol

from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError
from oncelog.storage.keep_rules import MIN_CLEANABLE_DIRTY_RATIO, KeepRules, is_compacted
from oncelog.storage.engines.local.segment import LogSegment, segment_stem
from oncelog.storage.config import LogConfig

__all__ = ["CleanableLog", "Cleaner", "CleanResult", "recover"]

log = logging.getLogger(__name__)

TMP_DIR = "cleaner.tmp"
SWAP_SUFFIX = ".swap"
_SEGMENT_EXTS = (".log", ".index", ".timeindex")
_CHUNK = 1 << 20
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF


# -- recovery -------------------------------------------------------------------------------------


def recover(data_dir: Path) -> int:
    """Finish or undo interrupted cleanings in every partition directory of ``data_dir`` (call
    before opening the logs). Returns the number of swaps completed."""
    done = 0
    if not data_dir.is_dir():
        return 0
    for part in data_dir.iterdir():
        if not part.is_dir():
            continue
        shutil.rmtree(part / TMP_DIR, ignore_errors=True)
        for swap in sorted(part.glob(f"*{SWAP_SUFFIX}")):
            if swap.is_dir() and _finish_swap(part, swap):
                log.warning("%s: completed an interrupted compaction swap %s", part, swap.name)
                done += 1
    return done


def _parse_swap(name: str) -> tuple[int, int] | None:
    stem = name[: -len(SWAP_SUFFIX)]
    x, sep, y = stem.partition("-")
    if not sep or not (x.isdigit() and y.isdigit()):
        return None
    return int(x), int(y)


def _finish_swap(part: Path, swap: Path) -> bool:
    """Make the new segment of ``swap`` live: remove every segment file based in [X, Y) still
    in ``part`` (unless the new ``.log`` was already moved in), move the new files in, ``.log``
    last. Idempotent."""
    span = _parse_swap(swap.name)
    if span is None:
        log.error("%s: unknown swap directory %s left alone", part, swap.name)
        return False
    x, y = span
    if (swap / f"{segment_stem(x)}.log").exists():
        for f in part.iterdir():
            stem, dot, ext = f.name.partition(".")
            if (dot and f".{ext}" in _SEGMENT_EXTS and len(stem) == 20 and stem.isdigit()
                    and x <= int(stem) < y and f.is_file()):
                f.unlink()
    for f in sorted(swap.iterdir(), key=lambda p: p.suffix == ".log"):
        os.replace(f, part / f.name)
    swap.rmdir()
    _fsync_dir(part)
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- a pass -----------------------------------------------------------------------------------------


class CleanableLog(Protocol):
    """What the cleaner needs of the log it compacts (log.py's ``PartitionLog``, whose
    ``plan_compaction`` calls the cleaner)."""

    path: Path
    config: LogConfig

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The live segments, oldest first."""
        ...

    def replace_segments(self, old: list[LogSegment], new: LogSegment, now_ms: int) -> None:
        """Put ``new`` in the place of ``old`` (segments whose files the cleaner moved away)."""
        ...


@dataclass
class _Group:
    """Consecutive old segments and the one new segment that replaces them."""

    segments: list[LogSegment] = field(default_factory=list)
    end: int = -1  # base offset of the segment after the group (Y)
    built: Path | None = None  # directory holding the new segment's files
    changed: bool = False
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass
class _Plan:
    plog: CleanableLog
    segments: list[LogSegment]  # the cleanable segments
    fds: list[tuple[int, int]]  # a duplicated descriptor and the size of each
    after: int  # base offset of the first segment after them
    delete_retention_ms: int
    now_ms: int
    groups: list[_Group] = field(default_factory=list)  # formed by build()
    next_deadline: int | None = None


@dataclass
class CleanResult:
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass
class _State:
    clean_end: int = -1  # offsets below it were cleaned by the last pass
    next_deadline: int | None = None  # when a kept tombstone or marker becomes removable
    damaged: set[int] = field(default_factory=set)  # bases of segments a build could not read
    reported: set[int] = field(default_factory=set)  # bases of damaged segments already logged


class Cleaner:
    """Compacts partition logs; remembers per log how far it cleaned (in memory: after a restart
    the first pass cleans everything once more, which is harmless)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self._state: dict[Path, _State] = {}
        self.stop = stop if stop is not None else threading.Event()

    # -- on the event loop ----------------------------------------------------------------------

    def plan(self, plog: CleanableLog, upper: int, now_ms: int, *, force: bool = False) -> _Plan | None:
        """The groups of segments to clean now, or None when the log does not need it.
        ``upper``: nothing at or above this offset is touched (the partition's LSO)."""
        c = plog.config
        if not is_compacted(c.cleanup_policy):
            return None
        state = self._state.setdefault(plog.path, _State())
        cleanable: list[LogSegment] = []
        for seg in plog.segments[:-1]:
            if seg.next_offset > upper:
                break
            if seg.damage or seg.base_offset in state.damaged:
                if seg.base_offset not in state.reported:
                    state.reported.add(seg.base_offset)
                    log.warning("%s: compaction stops before segment %d: it holds damaged data", plog.path, seg.base_offset)
                break
            if c.min_compaction_lag_ms > 0 and seg.max_timestamp > now_ms - c.min_compaction_lag_ms:
                break
            cleanable.append(seg)
        if not cleanable:
            return None
        total = sum(s.size for s in cleanable)
        dirty = sum(s.size for s in cleanable if s.base_offset >= state.clean_end)
        due = state.next_deadline is not None and now_ms >= state.next_deadline
        if not force and not due and (dirty == 0 or dirty < MIN_CLEANABLE_DIRTY_RATIO * total):
            return None
        after = plog.segments[len(cleanable)].base_offset
        fds = [(os.dup(s.fd), s.size) for s in cleanable]
        return _Plan(plog, cleanable, fds, after, c.delete_retention_ms, now_ms)

    def commit(self, plan: _Plan) -> CleanResult:
        """Swap in the groups that changed (see the module docstring); close the duplicated
        descriptors. A group whose segments are no longer the live ones is dropped."""
        plog, result = plan.plog, CleanResult()
        try:
            for g in plan.groups:
                result.segments_before += len(g.segments)
                result.bytes_before += g.bytes_before or sum(s.size for s in g.segments)
                if not g.changed or g.built is None:
                    result.segments_after += len(g.segments)
                    result.bytes_after += sum(s.size for s in g.segments)
                    continue
                if not self._still_live(plog, g):
                    log.info("%s: segments changed while cleaning; skipping group at %d", plog.path, g.segments[0].base_offset)
                    result.segments_after += len(g.segments)
                    result.bytes_after += sum(s.size for s in g.segments)
                    continue
                new = self._swap(plog, g, plan.now_ms)
                result.segments_after += 1
                result.bytes_after += new.size
            state = self._state.setdefault(plog.path, _State())
            state.clean_end = plan.after
            state.next_deadline = plan.next_deadline
        finally:
            self._discard(plan)
        return result

    def abort(self, plan: _Plan) -> None:
        self._discard(plan)

    def _discard(self, plan: _Plan) -> None:
        for fd, _ in plan.fds:
            os.close(fd)
        plan.fds = []
        shutil.rmtree(plan.plog.path / TMP_DIR, ignore_errors=True)

    @staticmethod
    def _still_live(plog: CleanableLog, g: _Group) -> bool:
        live = list(plog.segments)
        for i, seg in enumerate(live):
            if seg is g.segments[0]:
                run = live[i : i + len(g.segments)]
                return (
                    len(run) == len(g.segments)
                    and all(a is b for a, b in zip(run, g.segments))
                    and i + len(g.segments) < len(live)
                    and live[i + len(g.segments)].base_offset == g.end
                )
        return False

    @staticmethod
    def _swap(plog: CleanableLog, g: _Group, now_ms: int) -> LogSegment:
        assert g.built is not None
        x = g.segments[0].base_offset
        swap = plog.path / f"{segment_stem(x)}-{segment_stem(g.end)}{SWAP_SUFFIX}"
        os.rename(g.built, swap)  # the commit point
        _fsync_dir(plog.path)
        for seg in g.segments:
            seg.rename_to_deleted()
        _finish_swap(plog.path, swap)
        new = LogSegment.open(plog.path, x, index_interval_bytes=plog.config.index_interval_bytes, now_ms=now_ms)
        new.mark_inactive()
        plog.replace_segments(g.segments, new, now_ms)
        return new

    def clean(self, plog: CleanableLog, upper: int, now_ms: int, *, force: bool = False) -> CleanResult | None:
        """Plan, build and commit one pass synchronously (tests, tools). None if not needed."""
        plan = self.plan(plog, upper, now_ms, force=force)
        if plan is None:
            return None
        self.build(plan)
        return self.commit(plan)

    def pass_for(self, plog: CleanableLog, upper: int, now_ms: int) -> "LocalPass | None":
        """``plan`` as the engine contract's ``CompactionPass`` (``PartitionLog.plan_compaction``)."""
        plan = self.plan(plog, upper, now_ms)
        return None if plan is None else LocalPass(self, plan)

    # -- may run in a thread ----------------------------------------------------------------------

    def build(self, plan: _Plan) -> None:
        """Pass 1 (what is the latest record of each key, which transactions aborted), pass 2
        (write each group's kept batches into a new segment under ``cleaner.tmp``). Reads only
        the duplicated descriptors. On any failure (OSError, KafkaError, ``stop`` set) the plan is
        discarded — descriptors closed, temporary files removed — and the error raised, so a
        caller that runs this in a thread never has to touch the plan's descriptors itself."""
        try:
            self._build(plan)
        except BaseException:
            self._discard(plan)
            raise

    def _build(self, plan: _Plan) -> None:
        rules = KeepRules(plan.now_ms, plan.delete_retention_ms, plan.plog.path)  # storage/keep_rules.py
        for seg, (fd, size) in zip(plan.segments, plan.fds):
            try:
                for h, data in _batches(fd, size):
                    rules.observe(h, data)
            except KafkaError as exc:  # from _batches: the segment is not a whole chain of batches
                self._state.setdefault(plan.plog.path, _State()).damaged.add(seg.base_offset)
                raise KafkaError(f"{seg.log_path}: cannot be read whole ({exc}); it is left out of compaction") from exc
        tmp = plan.plog.path / TMP_DIR
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        limit = plan.plog.config.segment_bytes
        group: _Group | None = None
        out: LogSegment | None = None
        try:
            for seg, (fd, size) in zip(plan.segments, plan.fds):
                kept: list[bytes] = []
                changed = False
                for h, data in _batches(fd, size):
                    if self.stop.is_set():
                        raise InterruptedError("cleaner stopping")
                    new = rules.decide(h, data)
                    if new is None:
                        changed = True
                    else:
                        changed = changed or (new is not data and new != data)
                        kept.append(new)
                kept_size = sum(len(b) for b in kept)
                if group is None or out is None or (out.size and out.size + kept_size > limit) or (
                    seg.next_offset - group.segments[0].base_offset > _MAX_RELATIVE_OFFSET
                ):
                    if group is not None and out is not None:
                        self._seal(group, out, seg.base_offset)
                    group = _Group()
                    plan.groups.append(group)
                    out_dir = tmp / segment_stem(seg.base_offset)
                    out_dir.mkdir()
                    group.built = out_dir
                    out = LogSegment.create(out_dir, seg.base_offset, index_interval_bytes=plan.plog.config.index_interval_bytes,
                                            now_ms=plan.now_ms)
                group.segments.append(seg)
                group.changed = group.changed or changed or len(group.segments) > 1
                group.bytes_before += size
                for b in kept:
                    out.append(b, records.parse_header(b))
            if group is not None and out is not None:
                self._seal(group, out, plan.after)
                out = None
            plan.next_deadline = rules.next_deadline
        finally:
            if out is not None:
                out.close()
        _fsync_dir(tmp)

    @staticmethod
    def _seal(group: _Group, out: LogSegment, end: int) -> None:
        group.end = end
        group.bytes_after = out.size
        out.mark_inactive()
        out.flush()
        out.close()
        assert group.built is not None
        _fsync_dir(group.built)


def _batches(fd: int, size: int) -> Iterator[tuple[records.BatchHeader, bytes]]:
    """Every batch of a segment file (read through ``fd``), with its bytes. Raises KafkaError at
    the first position that does not hold a whole batch (a damaged segment)."""
    pos = 0
    while pos < size:
        buf = os.pread(fd, min(_CHUNK, size - pos), pos)
        consumed = 0
        for p, h in records.iter_batches(buf):
            yield h, buf[p : p + h.size]
            consumed = p + h.size
        if consumed == 0:  # a batch larger than the chunk
            h = records.parse_header(buf)
            if h.size <= len(buf) or pos + h.size > size:
                raise KafkaError(f"unreadable batch at position {pos}")
            yield h, os.pread(fd, h.size, pos)
            consumed = h.size
        pos += consumed


class LocalPass:
    """One planned pass of the local cleaner as the engine contract's ``CompactionPass``
    (storage/engine.py): ``build`` in a thread, ``commit`` (the swap) on the event loop."""

    def __init__(self, cleaner: Cleaner, plan: _Plan) -> None:
        self._cleaner = cleaner
        self._plan = plan

    def build(self) -> None:
        self._cleaner.build(self._plan)  # discards the plan if it fails

    def commit(self) -> str | None:
        res = self._cleaner.commit(self._plan)
        if res.bytes_after == res.bytes_before:
            return None
        return (f"{res.segments_before} segment(s), {res.bytes_before} bytes -> "
                f"{res.segments_after} segment(s), {res.bytes_after} bytes")

    def abort(self) -> None:
        self._cleaner.abort(self._plan)

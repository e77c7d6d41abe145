"""Damage inside a segment that recovery does not cut (R1, R22): a zeroed batch length, a
garbage header, a batch that fails its CRC in the tail of an *inactive* segment. Every batch
before the damage is served, offsets inside it answer CORRUPT_MESSAGE (never a crash, never
KAFKA_STORAGE_ERROR, never the damaged bytes), reads resume after it, the damage is logged once
with the file, the position and the offsets, and nothing acknowledged is cut off the disk."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

import bad_batches
from oncelog.broker.partitions.partition import Partition
from oncelog.protocol import records as R
from oncelog.protocol.errors import CorruptMessage
from oncelog.storage.engines.local.cleaner import Cleaner
from oncelog.storage.parts import FileSlice
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog
from oncelog.types import TopicPartition

CONFIG = LogConfig(segment_bytes=6_000, index_interval_bytes=300)


def _batch(i: int) -> bytes:
    """Batch number ``i``: two records whose values name the batch, 1 to 2 hundred bytes."""
    return R.build_batch([(b"k%d" % (i % 7), b"v%05d-" % i + b"." * (i % 90), ()), (None, b"w%05d" % i, ())],
                         timestamp_ms=1_000 + i)


def _write(path: Path, count: int = 150, config: LogConfig = CONFIG) -> list[tuple[int, int]]:
    """A log of ``count`` batches; returns (base, last) offsets per batch."""
    log = PartitionLog.open(path, config, 0)
    out = []
    for i in range(count):
        buf = _batch(i)
        out.append(log.append(buf, R.parse_header(buf), 0))
    log.close()
    return out


def _segment_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def _batches_of(log_file: Path) -> list[tuple[int, R.BatchHeader]]:
    return list(R.iter_batches(log_file.read_bytes()))


def _bytes(slices: list[FileSlice]) -> bytes:
    return b"".join(os.pread(s.fd, s.length, s.position) for s in slices)


def _offsets(data: bytes) -> list[int]:
    """Every record offset in ``data``, which must be whole batches with valid CRCs."""
    out, pos = [], 0
    for p, h in R.iter_batches(data, verify_crc=True):
        assert p == pos, f"bytes at {pos} are not a valid batch"
        out.extend(r.offset for r in R.iter_records(data[p : p + h.size]))
        pos = p + h.size
    assert pos == len(data), f"{len(data) - pos} bytes after the last valid batch"
    return out


def _read_all(log: PartitionLog, start: int, max_bytes: int) -> tuple[list[int], int]:
    """Read from ``start`` until the log end or an error; (offsets read, offset that failed or
    the log end)."""
    got: list[int] = []
    offset = start
    for _ in range(10_000):
        if offset >= log.log_end_offset:
            return got, offset
        try:
            data = log.read_batches(offset, max_bytes)
        except CorruptMessage:
            return got, offset
        offs = [o for o in _offsets(data) if o >= offset]
        assert offs, f"read at {offset} returned nothing"
        got.extend(offs)
        offset = offs[-1] + 1
    raise AssertionError("read loop did not end")


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, list[tuple[int, int]], int, R.BatchHeader]:
    """A log of several segments whose first segment has a zeroed batch length in its middle,
    before its last index entry (where open does not look). Returns (path, batches, position,
    header of the damaged batch)."""
    path = tmp_path / "t-0"
    batches = _write(path)
    first = _segment_files(path)[0]
    assert len(_segment_files(path)) >= 3
    victims = _batches_of(first)
    pos, h = victims[len(victims) // 3]
    assert bad_batches.zero_batch_length(first, len(victims) // 3) == pos
    return path, batches, pos, h


@pytest.mark.parametrize("max_bytes", [100, 1_000, 1 << 20])
def test_everything_before_the_damage_is_served(damaged, max_bytes: int) -> None:
    path, batches, pos, h = damaged
    log = PartitionLog.open(path, CONFIG, 0)
    got, failed_at = _read_all(log, 0, max_bytes)
    assert got == list(range(h.base_offset)), "records before the damage"
    assert failed_at == h.base_offset
    log.close()


def test_a_read_at_the_damage_answers_corrupt_message_and_reads_resume_after_it(damaged, caplog) -> None:
    path, batches, pos, h = damaged
    caplog.set_level(logging.INFO)
    log = PartitionLog.open(path, CONFIG, 0)
    with pytest.raises(CorruptMessage):
        log.read(h.base_offset, 1 << 20)
    with pytest.raises(CorruptMessage):
        log.read(h.last_offset, 1 << 20)
    # the first offset that is readable again is at most one index interval (plus a batch) on
    resume = next(o for o in range(h.base_offset, log.log_end_offset) if _readable(log, o))
    after = [b for b in batches if b[0] >= resume]
    assert after and after[0][0] == resume
    assert sum(1 for b in batches if h.base_offset <= b[0] < resume) <= 1 + CONFIG.index_interval_bytes // 100
    got, end = _read_all(log, resume, 1 << 20)
    assert got == list(range(resume, log.log_end_offset)) and end == log.log_end_offset
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and f"position {pos}" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "t-0" in lines[0] and f"{h.base_offset}..{resume - 1}" in lines[0] and f"offset {resume}" in lines[0]
    log.close()


def _readable(log: PartitionLog, offset: int) -> bool:
    try:
        log.read(offset, 1 << 20)
        return True
    except CorruptMessage:
        return False


def test_the_damaged_file_is_never_cut(damaged) -> None:
    path, batches, pos, h = damaged
    sizes = {p.name: p.stat().st_size for p in _segment_files(path)}
    log = PartitionLog.open(path, CONFIG, 0)
    _read_all(log, 0, 1 << 20)
    buf = _batch(999)
    log.append(buf, R.parse_header(buf), 0)
    log.close()
    again = PartitionLog.open(path, CONFIG, 0)
    assert {p.name: p.stat().st_size for p in _segment_files(path)[:-1]} == {k: v for k, v in sizes.items() if k in
                                                                              {p.name for p in _segment_files(path)[:-1]}}
    assert again.log_end_offset == batches[-1][1] + 3
    again.close()


def test_loaders_iterate_every_readable_batch_around_the_damage(damaged, caplog) -> None:
    """iter_batches (coordinator loading) and iter_headers (producer-state rebuild) skip the
    damaged region and go on; before, both raised KafkaStorageError."""
    path, batches, pos, h = damaged
    log = PartitionLog.open(path, CONFIG, 0)
    caplog.set_level(logging.INFO)
    seen = [hh.base_offset for hh, _data in log.iter_batches()]
    headers = [hh.base_offset for hh in log.iter_headers(0)]
    assert seen == headers
    bases = [b for b, _ in batches]
    assert seen[: bases.index(h.base_offset)] == bases[: bases.index(h.base_offset)]
    assert seen[-1] == bases[-1] and h.base_offset not in seen
    assert len(bases) - len(seen) <= 1 + CONFIG.index_interval_bytes // 100
    log.close()


def test_partition_open_rebuilds_producer_state_across_the_damage(damaged) -> None:
    """Without a producer-state snapshot the whole log's headers are replayed on open: the
    damage must not stop the partition (and so the broker) from opening."""
    path, batches, pos, h = damaged
    for snap in path.glob("*.snapshot"):
        snap.unlink()
    part = Partition.open(TopicPartition("t", 0), path, CONFIG, 0)
    assert part.high_watermark == batches[-1][1] + 1
    part.close()


def test_damage_in_the_tail_of_an_inactive_segment_is_not_cut(tmp_path: Path, caplog) -> None:
    """A CRC failure after the last index entry of an *inactive* segment: before, open cut the
    segment there (losing the acknowledged batches after it in that segment). It was fsynced
    when the log rolled, so this is damage, not a torn write: kept, reported, skipped."""
    path = tmp_path / "t-0"
    batches = _write(path)
    first = _segment_files(path)[0]
    size = first.stat().st_size
    victims = _batches_of(first)
    pos, h = victims[-2]
    data = bytearray(first.read_bytes())
    data[pos + 70] ^= 0xFF  # inside the records: the CRC fails
    first.write_bytes(bytes(data))
    caplog.set_level(logging.INFO)
    log = PartitionLog.open(path, CONFIG, 0)
    assert first.stat().st_size == size, "an inactive segment was cut"
    got, failed = _read_all(log, 0, 1 << 20)
    assert got == list(range(h.base_offset)) and failed == h.base_offset
    second_base = log.segments[1].base_offset
    with pytest.raises(CorruptMessage):
        log.read(second_base - 1, 1 << 20)
    got, end = _read_all(log, second_base, 1 << 20)
    assert got == list(range(second_base, log.log_end_offset))
    assert [r for r in caplog.records if f"position {pos}" in r.getMessage() and r.levelno >= logging.WARNING], caplog.text
    log.close()


def test_garbage_over_a_whole_index_interval(tmp_path: Path) -> None:
    """Several kilobytes of garbage inside an inactive segment: everything before is served,
    reads resume at the first index entry after it whose batch is sound."""
    path = tmp_path / "t-0"
    batches = _write(path)
    first = _segment_files(path)[0]
    victims = _batches_of(first)
    pos = victims[3][0]
    end = victims[-4][0]
    data = bytearray(first.read_bytes())
    data[pos:end - 1] = os.urandom(end - 1 - pos)
    first.write_bytes(bytes(data))
    log = PartitionLog.open(path, CONFIG, 0)
    got, failed = _read_all(log, 0, 1 << 20)
    assert got == list(range(victims[3][1].base_offset))
    resume = next(o for o in range(failed, log.log_end_offset) if _readable(log, o))
    got, _ = _read_all(log, resume, 1 << 20)
    assert got == list(range(resume, log.log_end_offset))
    assert resume <= log.segments[1].base_offset
    log.close()


def test_active_segment_damage_before_its_tail_and_appends_after_it(tmp_path: Path) -> None:
    """The same damage in the active segment (before the tail that recovery checks): served
    up to it, resumed after it, and new appends are readable."""
    path = tmp_path / "t-0"
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=300)
    batches = _write(path, count=80, config=config)
    [only] = _segment_files(path)
    pos = bad_batches.zero_batch_length(only, 10)
    log = PartitionLog.open(path, config, 0)
    got, failed = _read_all(log, 0, 1 << 20)
    assert got == list(range(batches[10][0]))
    buf = _batch(500)
    base, last = log.append(buf, R.parse_header(buf), 0)
    assert base == batches[-1][1] + 1
    assert _offsets(log.read_batches(base, 1 << 20)) == [base, last]
    log.close()


def test_truncate_inside_the_damage_cuts_at_its_start(damaged) -> None:
    path, batches, pos, h = damaged
    log = PartitionLog.open(path, CONFIG, 0)
    with pytest.raises(CorruptMessage):
        log.read(h.base_offset, 100)
    log.truncate_to(h.base_offset + 1)
    assert log.log_end_offset == h.base_offset
    assert _segment_files(path)[0].stat().st_size == pos
    buf = _batch(700)
    base, _ = log.append(buf, R.parse_header(buf), 0)
    got, end = _read_all(log, 0, 1 << 20)
    assert got == list(range(base + 2)) and end == base + 2
    log.close()


def test_compaction_leaves_a_damaged_segment_alone(tmp_path: Path) -> None:
    """The cleaner must not rewrite a segment it cannot read whole: that would drop every batch
    after the damage. It compacts the rest and keeps the damaged segment as it is."""
    path = tmp_path / "t-0"
    config = LogConfig(segment_bytes=6_000, index_interval_bytes=300, cleanup_policy="compact")
    _write(path, config=config)
    first = _segment_files(path)[0]
    pristine_size = first.stat().st_size
    bad_batches.zero_batch_length(first, 12)
    log = PartitionLog.open(path, config, 0)
    cleaner = Cleaner()
    for _ in range(2):
        try:
            cleaner.clean(log, log.log_end_offset, 10**12, force=True)
        except Exception:
            pass
    assert os.path.getsize(path / first.name) == pristine_size
    log.close()
    shutil.rmtree(path / "cleaner.tmp", ignore_errors=True)


def test_compaction_stops_before_a_damaged_segment_and_keeps_undecodable_batches(tmp_path: Path, caplog) -> None:
    """Damage the open found: the pass compacts nothing from that segment on (logged once).
    A batch whose records do not decode (client garbage, sound header) is kept whole."""
    path = tmp_path / "t-0"
    config = LogConfig(segment_bytes=6_000, index_interval_bytes=300, cleanup_policy="compact")
    log = PartitionLog.open(path, config, 0)
    garbage = bad_batches.with_garbage_compression(R.build_batch([(b"g", b"x", ())] * 3, timestamp_ms=1))
    log.append(garbage, R.parse_header(garbage), 0)
    for i in range(150):
        buf = _batch(i)
        log.append(buf, R.parse_header(buf), 0)
    log.close()
    third = _segment_files(path)[2]
    size = third.stat().st_size
    bad_batches.zero_batch_length(third, 3)
    caplog.set_level(logging.INFO)
    log = PartitionLog.open(path, config, 0)
    log.read_batches(log.segments[2].base_offset, 1 << 20)  # finds the damage
    result = Cleaner().clean(log, log.log_end_offset, 10**12, force=True)
    assert result is not None and result.bytes_after < result.bytes_before, "the segments before were compacted"
    assert (path / third.name).stat().st_size == size
    assert sum("compaction stops before segment" in r.getMessage() for r in caplog.records) == 1
    first = R.parse_header(log.read_batches(0, 1 << 20))
    assert first.base_offset == 0 and first.records_count == 3, "the undecodable batch is kept"
    log.close()

"""LogSegment: append, header-only reads, recovery of torn tails, index rebuilds (R1, R22)."""

from __future__ import annotations

import os
import random

import pytest

from oncelog.protocol import records as R
from oncelog.storage.engines.local import segment as segment_mod
from oncelog.storage.engines.local.segment import LogSegment, segment_stem

INTERVAL = 256


def _batch(base: int, n: int, ts: int, size: int = 40) -> tuple[bytes, R.BatchHeader]:
    buf = R.build_batch([(None, b"v" * size, ())] * n, timestamp_ms=ts, base_offset=base)
    return buf, R.parse_header(buf)


def _fill(d, base=1000, count=40, seed=1):
    """A segment with ``count`` batches of varied sizes and non-monotonic timestamps."""
    rng = random.Random(seed)
    seg = LogSegment.create(d, base, index_interval_bytes=INTERVAL, now_ms=0)
    batches = []
    off = base
    for _ in range(count):
        buf, h = _batch(off, rng.randint(1, 5), rng.randint(1_000, 2_000), rng.randint(1, 200))
        pos = seg.append(buf, h)
        batches.append((pos, h, buf))
        off = h.next_offset
    return seg, batches


def _state(seg):
    return (seg.size, seg.next_offset, seg.max_timestamp, len(seg.index), seg.index.last_entry,
            len(seg.timeindex), seg.timeindex.last_offset)


def _files(d, base):
    stem = d / segment_stem(base)
    return {ext: (stem.parent / f"{stem.name}{ext}") for ext in (".log", ".index", ".timeindex")}


def test_append_tracks_state_and_writes_sparse_indexes(tmp_path):
    seg, batches = _fill(tmp_path)
    assert seg.size == sum(len(b) for _, _, b in batches) == os.path.getsize(seg.log_path)
    assert seg.next_offset == batches[-1][1].next_offset
    assert seg.max_timestamp == max(h.max_timestamp for _, h, _ in batches)
    assert 3 < len(seg.index) < len(batches)
    positions = {pos: h.base_offset for pos, h, _ in batches}
    for off, pos in (seg.index.lookup_position(p) for p in range(0, seg.size, 97)):
        assert pos == 0 or positions[pos] == off  # every entry names a batch start
    seg.close()


def test_find_batch_and_read(tmp_path):
    seg, batches = _fill(tmp_path)
    for pos, h, _ in batches:
        for off in (h.base_offset, h.last_offset):
            assert seg.find_batch(off) == (pos, h)
    assert seg.find_batch(seg.next_offset) is None
    assert seg.find_batch(0) == (0, batches[0][1])
    p3, h3, _ = batches[3]
    p6 = batches[6][0]
    assert seg.read(h3.base_offset, 10**9, batches[6][1].base_offset, True) == (p3, p6 - p3)
    assert seg.read(h3.base_offset, p6 - p3 - 1, 10**9, True) == (p3, batches[5][0] - p3)
    assert seg.read(h3.base_offset, 1, 10**9, True) == (p3, h3.size)
    assert seg.read(h3.base_offset, 1, 10**9, False) == (p3, 0)
    assert seg.read(h3.base_offset, 10**9, h3.last_offset, True) == (p3, 0)
    seg.close()


def test_boundary_at_or_before(tmp_path):
    seg, batches = _fill(tmp_path)
    starts = [p for p, _, _ in batches] + [seg.size]
    for limit in range(0, seg.size + 10, 13):
        assert seg.boundary_at_or_before(0, limit) == max(s for s in starts if s <= limit)
    seg.close()


def test_reopen_equals_before(tmp_path):
    seg, _ = _fill(tmp_path)
    seg.mark_inactive()
    before = _state(seg)
    seg.close()
    again = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)
    assert _state(again) == before and again.truncated_on_open == 0
    again.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "stale", "shuffle"])
@pytest.mark.parametrize("which", [".index", ".timeindex"])
def test_damaged_index_is_rebuilt_identically(tmp_path, damage, which):
    seg, _ = _fill(tmp_path)
    before = _state(seg)
    files = _files(tmp_path, 1000)
    pristine = {k: p.read_bytes() for k, p in files.items()}
    seg.close()
    p = files[which]
    if damage == "delete":
        p.unlink()
    elif damage == "garbage":
        p.write_bytes(pristine[which] + b"\xff\x01\x02")
    elif damage == "stale":  # entries that point at the wrong batch / past the log end
        entry = b"\0\0\0\x01\0\0\0\x08" if which == ".index" else b"\x7f" + b"\0" * 7 + b"\x7f\0\0\0"
        p.write_bytes(pristine[which] + entry)
    else:
        size = 8 if which == ".index" else 12
        data = pristine[which]
        p.write_bytes(data[size:2 * size] + data[:size] + data[2 * size:])
    again = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)
    assert _state(again) == before and again.truncated_on_open == 0
    again.close()
    assert {k: p.read_bytes() for k, p in files.items()} == pristine


def test_index_entry_naming_the_wrong_offset_triggers_rebuild(tmp_path):
    seg, _ = _fill(tmp_path)
    before = _state(seg)
    files = _files(tmp_path, 1000)
    seg.close()
    data = bytearray(files[".index"].read_bytes())
    data[-5] ^= 1  # relative offset of the last entry, still increasing
    files[".index"].write_bytes(bytes(data))
    again = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)
    assert _state(again) == before
    again.close()


def _reopen_with_log(tmp_path, pristine, log_bytes):
    files = _files(tmp_path, 1000)
    for k, p in files.items():
        p.write_bytes(pristine[k])
    files[".log"].write_bytes(log_bytes)
    return LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)


def test_recovery_cuts_torn_last_batch_at_every_byte(tmp_path):
    seg, batches = _fill(tmp_path, count=25)
    files = _files(tmp_path, 1000)
    seg.close()
    pristine = {k: p.read_bytes() for k, p in files.items()}
    last_pos, last_h, last_buf = batches[-1]
    prev_h = batches[-2][1]
    for cut in range(last_pos, last_pos + last_h.size):
        seg = _reopen_with_log(tmp_path, pristine, pristine[".log"][:cut])
        assert seg.truncated_on_open == cut - last_pos
        assert seg.size == last_pos == os.path.getsize(seg.log_path)
        assert seg.next_offset == prev_h.next_offset
        assert seg.max_timestamp == max(h.max_timestamp for _, h, _ in batches[:-1])
        assert seg.append(last_buf, last_h) == last_pos  # appending afterwards works
        assert seg.find_batch(last_h.last_offset) == (last_pos, last_h)
        seg.close()


@pytest.mark.parametrize("victim", [0, 1, -1])
def test_recovery_cuts_at_corrupt_byte_in_tail(tmp_path, victim):
    """Any batch from the last index entry on is CRC-checked at open (the tail)."""
    seg, batches = _fill(tmp_path, count=25)
    for _ in range(3):
        buf, h = _batch(seg.next_offset, 1, 1500, size=5)
        batches.append((seg.append(buf, h), h, buf))
    files = _files(tmp_path, 1000)
    tail_start = seg.index.last_entry[1]
    seg.close()
    pristine = {k: p.read_bytes() for k, p in files.items()}
    tail = [b for b in batches if b[0] >= tail_start]
    assert len(tail) >= 2
    pos, h, _ = tail[victim]
    for at in (pos + 17, pos + 30, pos + h.size - 1):
        bad = bytearray(pristine[".log"])
        bad[at] ^= 0x10
        seg = _reopen_with_log(tmp_path, pristine, bytes(bad))
        assert seg.size == pos and seg.next_offset == h.base_offset
        assert seg.truncated_on_open == len(bad) - pos
        assert seg.max_timestamp == max([-1] + [hh.max_timestamp for p, hh, _ in batches if p < pos])
        seg.close()


def test_corrupt_batch_before_the_last_index_entry_needs_a_full_rebuild_to_be_seen(tmp_path):
    seg, batches = _fill(tmp_path, count=25)
    seg.close()
    files = _files(tmp_path, 1000)
    pristine = {k: p.read_bytes() for k, p in files.items()}
    pos, h, _ = batches[2]
    bad = bytearray(pristine[".log"])
    bad[pos + 40] ^= 1
    files[".log"].write_bytes(bytes(bad))
    files[".index"].unlink()  # a missing index means a full CRC scan
    seg = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)
    assert seg.size == pos and seg.next_offset == h.base_offset
    seg.close()


def test_garbage_after_the_last_batch_is_cut(tmp_path):
    seg, batches = _fill(tmp_path, count=5)
    size = seg.size
    seg.close()
    with open(tmp_path / f"{segment_stem(1000)}.log", "ab") as f:
        f.write(b"\0" * 4096)
    seg = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)
    assert seg.size == size and seg.truncated_on_open == 4096
    seg.close()


def test_batches_out_of_offset_order_are_cut(tmp_path):
    seg, batches = _fill(tmp_path, count=5)
    size = seg.size
    seg.close()
    with open(tmp_path / f"{segment_stem(1000)}.log", "ab") as f:
        f.write(_batch(1000, 1, 5)[0])  # valid CRC, but an offset the segment already has
    seg = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=5)
    assert seg.size == size
    seg.close()


def test_batches_larger_than_the_scan_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_mod, "_SCAN_CHUNK", 100)
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL, now_ms=0)
    big = []
    for i in range(4):
        buf, h = _batch(i * 2, 2, 10 + i, size=300)
        seg.append(buf, h)
        big.append((buf, h))
    before = _state(seg)
    seg.close()
    log = tmp_path / f"{segment_stem(0)}.log"
    data = log.read_bytes()
    (tmp_path / f"{segment_stem(0)}.index").unlink()
    seg = LogSegment.open(tmp_path, 0, index_interval_bytes=INTERVAL, now_ms=0)
    assert _state(seg) == before
    seg.close()
    bad = bytearray(data)
    bad[-10] ^= 1
    log.write_bytes(bytes(bad))
    seg = LogSegment.open(tmp_path, 0, index_interval_bytes=INTERVAL, now_ms=0)
    assert seg.size == len(data) - big[-1][1].size and seg.next_offset == 6
    seg.close()


def test_truncate_to_removes_whole_batches(tmp_path):
    seg, batches = _fill(tmp_path)
    pos, h, _ = next(b for b in batches if b[1].records_count > 1 and b[0] > 2000)
    removed = seg.truncate_to(h.base_offset + 1)  # mid-batch: the whole batch goes
    assert seg.size == pos and seg.next_offset == h.base_offset
    assert removed == sum(len(b) for p, _, b in batches if p >= pos)
    assert seg.index.last_entry is None or seg.index.last_entry[1] < pos
    assert seg.max_timestamp == max(hh.max_timestamp for p, hh, _ in batches if p < pos)
    assert seg.truncate_to(10**9) == 0
    seg.close()
    again = LogSegment.open(tmp_path, 1000, index_interval_bytes=INTERVAL, now_ms=0)
    assert (again.size, again.next_offset) == (pos, h.base_offset)
    again.close()


def test_rename_to_deleted_keeps_fd_readable_until_delete(tmp_path):
    seg, batches = _fill(tmp_path, count=3)
    fd = seg.fd
    seg.rename_to_deleted()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{segment_stem(1000)}{ext}.deleted" for ext in (".index", ".log", ".timeindex")
    ]
    assert os.pread(fd, 10, 0) == batches[0][2][:10]
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_create_refuses_existing_segment(tmp_path):
    from oncelog.protocol.errors import KafkaStorageError

    LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL, now_ms=0).close()
    with pytest.raises(KafkaStorageError):
        LogSegment.create(tmp_path, 0, index_interval_bytes=INTERVAL, now_ms=0)


def test_find_timestamp_matches_brute_force(tmp_path):
    seg, batches = _fill(tmp_path, count=60, seed=7)
    seg.mark_inactive()
    for ts in range(990, 2010, 7):
        for min_off in (1000, batches[20][1].base_offset):
            want = next(((p, h) for p, h, _ in batches if h.max_timestamp >= ts and h.last_offset >= min_off), None)
            assert seg.find_timestamp(ts, min_off) == want
    seg.close()

"""Offset and time index files: lookups, truncation, validation on load (R1)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.storage.engines.local.index import IndexDamaged, OffsetIndex, TimeIndex


def test_offset_index_append_lookup_and_reload(tmp_path):
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex.create(p, 100)
    assert idx.lookup(150) == (100, 0) and idx.last_entry is None
    for off, pos in [(110, 500), (130, 1200), (170, 4000)]:
        idx.append(off, pos)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 500)
    assert idx.lookup(169) == (130, 1200)
    assert idx.lookup(10**9) == (170, 4000)
    assert idx.lookup_position(499) == (100, 0)
    assert idx.lookup_position(1200) == (130, 1200)
    assert idx.lookup_position(3999) == (130, 1200)
    idx.close()
    assert p.read_bytes() == struct.pack(">IIIIII", 10, 500, 30, 1200, 70, 4000)
    again = OffsetIndex.load(p, 100, log_size=5000)
    assert len(again) == 3 and again.last_entry == (170, 4000)
    again.truncate_to_position(1200)
    assert again.last_entry == (110, 500)
    again.close()
    assert p.stat().st_size == 8


def test_offset_index_rejects_non_increasing_entries(tmp_path):
    idx = OffsetIndex.create(tmp_path / "0.index", 0)
    idx.append(5, 100)
    for off, pos in [(5, 200), (6, 100), (4, 300)]:
        with pytest.raises(ValueError):
            idx.append(off, pos)
    idx.close()


@pytest.mark.parametrize(
    "content,log_size",
    [
        (b"\0" * 7, 1000),  # not a whole entry
        (struct.pack(">IIII", 5, 100, 5, 200), 1000),  # offsets repeat
        (struct.pack(">IIII", 5, 100, 6, 100), 1000),  # positions repeat
        (struct.pack(">IIII", 5, 100, 6, 900), 900),  # last entry at the end of the log
    ],
)
def test_offset_index_load_rejects_damage(tmp_path, content, log_size):
    p = tmp_path / "0.index"
    p.write_bytes(content)
    with pytest.raises(IndexDamaged):
        OffsetIndex.load(p, 0, log_size=log_size)


def test_missing_index_is_damage(tmp_path):
    with pytest.raises(IndexDamaged, match="missing"):
        OffsetIndex.load(tmp_path / "0.index", 0, log_size=10)
    with pytest.raises(IndexDamaged, match="missing"):
        TimeIndex.load(tmp_path / "0.timeindex", 0)


def test_time_index_lookup_before_and_truncate(tmp_path):
    p = tmp_path / "0.timeindex"
    t = TimeIndex.create(p, 1000)
    assert t.lookup_before(5) is None and t.last_timestamp == -1
    for ts, off in [(10, 1003), (20, 1010), (35, 1020)]:
        t.append(ts, off)
    assert t.lookup_before(10) is None
    assert t.lookup_before(11) == 1003
    assert t.lookup_before(20) == 1003
    assert t.lookup_before(36) == 1020
    with pytest.raises(ValueError):
        t.append(35, 1030)
    t.close()
    t2 = TimeIndex.load(p, 1000)
    assert (t2.last_timestamp, t2.last_offset) == (35, 1020)
    t2.truncate_to_offset(1010)
    assert (t2.last_timestamp, t2.last_offset) == (10, 1003)
    t2.reset()
    assert len(t2) == 0
    t2.close()
    assert p.stat().st_size == 0


def test_time_index_load_rejects_damage(tmp_path):
    p = tmp_path / "0.timeindex"
    p.write_bytes(struct.pack(">qIqI", 50, 1, 40, 2))
    with pytest.raises(IndexDamaged):
        TimeIndex.load(p, 0)
    p.write_bytes(b"\1" * 13)
    with pytest.raises(IndexDamaged):
        TimeIndex.load(p, 0)


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60), st.integers(-10, 3000))
def test_offset_index_lookup_matches_linear_search(tmp_path_factory, steps, target):
    d = tmp_path_factory.mktemp("idx")
    idx = OffsetIndex.create(d / "0.index", 0)
    off = pos = 0
    entries = []
    for do, dp in steps:
        off, pos = off + do, pos + dp
        idx.append(off, pos)
        entries.append((off, pos))
    expected = max((e for e in entries if e[0] <= target), default=(0, 0))
    assert idx.lookup(target) == expected
    expected_pos = max((e for e in entries if e[1] <= target), default=(0, 0))
    assert idx.lookup_position(target) == expected_pos
    idx.close()
    loaded = OffsetIndex.load(d / "0.index", 0, log_size=pos + 1)
    assert loaded.last_entry == (entries[-1] if entries else None)
    loaded.close()

"""PartitionLog: offsets, reads (whole batches, KIP-74), recovery, retention (R1, R4, R22)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.clock import ManualClock
from oncelog.protocol import records as R
from oncelog.protocol.errors import InvalidConfig, MessageTooLarge, OffsetOutOfRange
from oncelog.storage.engines.local import segment as segment_mod
from oncelog.storage.parts import FileSlice
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog

SMALL = LogConfig(segment_bytes=2_000, index_interval_bytes=200)


def _batch(n: int = 3, ts: int = 1_000, size: int = 30) -> bytes:
    return R.build_batch([(b"k", b"v" * size, ())] * n, timestamp_ms=ts)


def _append(log: PartitionLog, buf: bytes, now_ms: int = 0) -> tuple[int, int]:
    return log.append(buf, R.parse_header(buf), now_ms)


def _bytes(slices: list[FileSlice]) -> bytes:
    return b"".join(os.pread(s.fd, s.length, s.position) for s in slices)


def _ranges(slices: list[FileSlice]) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in R.iter_batches(_bytes(slices), verify_crc=True)]


def _fill(log: PartitionLog, count: int, seed: int = 0, now_ms: int = 0, ts=None) -> list[tuple[int, int, bytes]]:
    """Append ``count`` batches of random sizes; returns (base, last, stored bytes) per batch."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        buf = _batch(rng.randint(1, 6), ts if ts is not None else rng.randint(1_000, 9_000), rng.randint(0, 150))
        base, last = _append(log, buf, now_ms)
        out.append((base, last, R.with_base_offset(buf, base)))
    return out


def _model(batches, offset, max_bytes, max_offset, min_one=True) -> bytes:
    """What ``read`` must return, computed from the list of batches."""
    out, total = [], 0
    for base, last, buf in batches:
        if last < offset:
            continue
        if last >= max_offset:
            break
        if total + len(buf) > max_bytes and (out or not min_one):
            break
        out.append(buf)
        total += len(buf)
    return b"".join(out)


# -- appends and reads --------------------------------------------------------------------


def test_offsets_are_assigned_contiguously_across_segments(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    batches = _fill(log, 120)
    assert [b[0] for b in batches] == [0] + [b[1] + 1 for b in batches[:-1]]
    assert log.log_end_offset == batches[-1][1] + 1 and log.log_start_offset == 0
    assert len(log.segments) > 10
    assert all(s.size <= SMALL.segment_bytes for s in log.segments)
    assert log.size_bytes == sum(len(b[2]) for b in batches)
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert names[:3] == ["00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    assert _bytes(log.read(0, 10**9)) == b"".join(b[2] for b in batches)
    log.close()


def test_stored_batches_carry_offsets_and_valid_crc(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    _fill(log, 30)
    data = _bytes(log.read(0, 10**9))
    assert R.valid_prefix_end(data, verify_crc=True) == len(data)
    offsets = [r.offset for p, _ in R.iter_batches(data) for r in R.iter_records(data[p:])]
    assert offsets == list(range(log.log_end_offset))
    log.close()


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    log = PartitionLog.open(tmp_path_factory.mktemp("read") / "t-0", SMALL, 0)
    batches = _fill(log, 150, seed=3)
    yield log, batches
    log.close()


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_read_matches_model(filled, data):
    log, batches = filled
    leo = log.log_end_offset
    offset = data.draw(st.integers(0, leo - 1))
    max_bytes = data.draw(st.integers(-1, 12_000))
    max_offset = data.draw(st.one_of(st.none(), st.integers(0, leo + 5)))
    min_one = data.draw(st.booleans())
    slices = log.read(offset, max_bytes, max_offset, min_one)
    assert _bytes(slices) == _model(batches, offset, max_bytes, leo if max_offset is None else max_offset, min_one)
    segs = [s.fd for s in slices]
    assert len(segs) == len(set(segs))  # one slice per segment


def test_read_semantics(filled):
    log, batches = filled
    base, last, buf = next(b for b in batches if b[1] > b[0] and b[0] > 0)
    # a mid-batch offset returns the whole batch containing it
    assert _ranges(log.read(base + 1, len(buf)))[0] == (base, last)
    # max_bytes: whole batches only
    assert _ranges(log.read(base, len(buf) + 10)) == [(base, last)]
    # KIP-74: a first batch larger than max_bytes still comes back, unless min_one_batch is off
    assert _ranges(log.read(base, 1)) == [(base, last)]
    assert log.read(base, 1, min_one_batch=False) == []
    # max_offset: only batches entirely below it
    assert log.read(base, 10**9, max_offset=last) == []
    assert _ranges(log.read(base, 10**9, max_offset=last + 1)) == [(base, last)]
    # the log end
    assert log.read(log.log_end_offset, 10**9) == []
    with pytest.raises(OffsetOutOfRange):
        log.read(log.log_end_offset + 1, 10)


def test_read_spans_segments(filled):
    log, batches = filled
    seg = log.segments[3]
    slices = log.read(seg.base_offset - 1, 3 * SMALL.segment_bytes)
    assert len(slices) >= 3
    assert slices[1] == FileSlice(seg.fd, 0, seg.size)


def test_reopen_after_close_equals_before(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    _fill(log, 80)
    before = (log.log_start_offset, log.log_end_offset, log.size_bytes, _bytes(log.read(0, 10**9)),
              [(s.base_offset, s.next_offset, s.size, s.max_timestamp) for s in log.segments])
    files = {n: (path / n).read_bytes() for n in os.listdir(path)}
    log.close()
    log = PartitionLog.open(path, SMALL, 10)
    after = (log.log_start_offset, log.log_end_offset, log.size_bytes, _bytes(log.read(0, 10**9)),
             [(s.base_offset, s.next_offset, s.size, s.max_timestamp) for s in log.segments])
    assert after == before
    assert {n: (path / n).read_bytes() for n in os.listdir(path)} == files
    log.close()


def test_reopen_without_close_like_kill_9(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    batches = _fill(log, 50)
    other = PartitionLog.open(path, SMALL, 0)  # the first instance never closed or flushed
    assert other.log_end_offset == log.log_end_offset
    assert _bytes(other.read(0, 10**9)) == b"".join(b[2] for b in batches)
    other.close()
    log.close()


def test_empty_log(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 100) == [] and log.offset_for_timestamp(0) is None
    log.close()


def test_message_too_large_and_header_mismatch(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(max_message_bytes=100), 0)
    big = _batch(3)
    with pytest.raises(MessageTooLarge):
        _append(log, big)
    with pytest.raises(ValueError):
        log.append(big[:-1], R.parse_header(big), 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.close()


# -- recovery ------------------------------------------------------------------------------


def test_torn_last_batch_at_every_byte_is_cut_on_open(tmp_path):
    pristine = tmp_path / "pristine"
    log = PartitionLog.open(pristine, SMALL, 0)
    batches = _fill(log, 40)
    log.close()
    active = sorted(pristine.glob("*.log"))[-1]
    data = active.read_bytes()
    last_len = len(batches[-1][2])
    for cut in range(len(data) - last_len, len(data)):
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(pristine, work)
        (work / active.name).write_bytes(data[:cut])
        log = PartitionLog.open(work, SMALL, 0)
        assert log.log_end_offset == batches[-1][0]
        assert _bytes(log.read(0, 10**9)) == b"".join(b[2] for b in batches[:-1])
        buf = _batch(2)
        assert _append(log, buf) == (batches[-1][0], batches[-1][0] + 1)
        log.close()
        shutil.rmtree(work)


def test_corrupt_byte_in_last_batch_is_cut_on_open(tmp_path, caplog):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    batches = _fill(log, 40)
    log.close()
    active = sorted(path.glob("*.log"))[-1]
    data = bytearray(active.read_bytes())
    data[-3] ^= 0x40
    active.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        log = PartitionLog.open(path, SMALL, 0)
    assert log.log_end_offset == batches[-1][0]
    assert any("cut" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)
    _append(log, _batch())
    assert _ranges(log.read(batches[-1][0], 10**9)) == [(batches[-1][0], batches[-1][0] + 2)]
    log.close()


def test_deleted_and_damaged_indexes_are_rebuilt(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    _fill(log, 80)
    expect = _bytes(log.read(0, 10**9))
    log.close()
    indexes = {n: (path / n).read_bytes() for n in os.listdir(path) if not n.endswith(".log")}
    names = sorted(indexes)
    for i, n in enumerate(names):
        if i % 3 == 0:
            (path / n).unlink()
        elif i % 3 == 1:
            (path / n).write_bytes(indexes[n][:5])
    log = PartitionLog.open(path, SMALL, 0)
    assert _bytes(log.read(0, 10**9)) == expect
    for off in range(0, log.log_end_offset, 7):
        assert _bytes(log.read(off, 500)) != b""
    log.close()
    assert {n: (path / n).read_bytes() for n in indexes} == indexes


def test_leftovers_are_cleaned_on_open(tmp_path):
    path = tmp_path / "t-0"
    path.mkdir()
    (path / "00000000000000000007.log.deleted").write_bytes(b"x")
    (path / "00000000000000000099.index").write_bytes(b"")
    log = PartitionLog.open(path, SMALL, 0)
    assert sorted(os.listdir(path)) == ["00000000000000000000.index", "00000000000000000000.log",
                                        "00000000000000000000.timeindex"]
    log.close()


# -- rolling and flushing ------------------------------------------------------------------


def test_roll_by_segment_ms_and_maybe_roll(tmp_path):
    clock = ManualClock()
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_ms=1_000), clock.now_ms())
    _append(log, _batch(), clock.now_ms())
    clock.advance(999)
    _append(log, _batch(), clock.now_ms())
    assert len(log.segments) == 1
    clock.advance(1)
    _append(log, _batch(), clock.now_ms())
    assert len(log.segments) == 2 and log.segments[-1].base_offset == 6
    assert not log.maybe_roll(clock.now_ms() + 999)
    assert log.maybe_roll(clock.now_ms() + 1_000)
    assert len(log.segments) == 3
    assert not log.maybe_roll(clock.now_ms() + 10_000)  # an empty active segment never rolls
    log.close()


@pytest.mark.parametrize("config,appends,expected", [
    (LogConfig(), 10, 0),
    (LogConfig(flush_messages=1), 4, 4),
    (LogConfig(flush_messages=7), 6, 2),  # 3 records per batch: fsync after 9 and after 18 records
    (LogConfig(flush_ms=100), 6, 2),  # appends every 40 ms: fsync at 120 ms and at 240 ms
])
def test_flush_policy(tmp_path, monkeypatch, config, appends, expected):
    calls = []
    monkeypatch.setattr(segment_mod.os, "fdatasync", lambda fd: calls.append(fd))
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    for i in range(appends):
        _append(log, _batch(3), now_ms=(i + 1) * 40)
    assert len(calls) == expected
    log.close()


def test_roll_flushes_the_old_segment(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(segment_mod.os, "fdatasync", lambda fd: calls.append(fd))
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    _fill(log, 40)
    assert len(calls) == len(log.segments) - 1
    log.close()


# -- timestamps ----------------------------------------------------------------------------


def test_offset_for_timestamp_matches_brute_force(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    rng = random.Random(5)
    records = []  # (offset, ts)
    for _ in range(120):
        n = rng.randint(1, 4)
        recs = [(None, b"x" * rng.randint(0, 100), (), rng.randint(1_000, 5_000)) for _ in range(n)]
        buf = R.build_batch(recs, timestamp_ms=recs[0][3])
        base, _ = _append(log, buf)
        records += [(base + i, r[3]) for i, r in enumerate(recs)]
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    batches = []
    for base, last in _ranges(log.read(0, 10**9)):
        batches.append((base, last, max(ts for o, ts in records if base <= o <= last)))
    for target in range(900, 5_100, 37):
        first_batch = next((b for b in batches if b[2] >= target), None)
        got = log.offset_for_timestamp(target)
        if first_batch is None:
            assert got is None
        else:
            want = next((o, ts) for o, ts in records if first_batch[0] <= o and ts >= target)
            assert got == want
    log.close()


# -- retention, log start, truncation ------------------------------------------------------


def test_retention_by_time_keeps_fds_until_cleanup(tmp_path):
    clock = ManualClock(1_000_000)
    config = LogConfig(segment_bytes=2_000, index_interval_bytes=200, retention_ms=10_000, file_delete_delay_ms=5_000)
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, config, clock.now_ms())
    old = _fill(log, 30, ts=clock.now_ms())
    clock.advance(8_000)
    _fill(log, 30, ts=clock.now_ms())
    n_old_segments = sum(1 for s in log.segments if s.max_timestamp == 1_000_000)
    slice0 = log.read(0, 100)[0]
    assert log.enforce_retention(clock.now_ms()) == 0
    clock.advance(2_001)
    deleted = log.enforce_retention(clock.now_ms())
    assert deleted == n_old_segments
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert os.pread(slice0.fd, slice0.length, slice0.position) == old[0][2][: slice0.length]
    assert len(list(path.glob("*.deleted"))) == 3 * deleted
    assert log.cleanup_deleted(clock.now_ms() + 4_999) == 0
    assert log.cleanup_deleted(clock.now_ms() + 5_000) == deleted
    assert list(path.glob("*.deleted")) == []
    start = log.log_start_offset
    log.close()
    log = PartitionLog.open(path, config, clock.now_ms())
    assert log.log_start_offset == start
    log.close()


def test_retention_never_deletes_the_active_segment(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(retention_ms=0), 0)
    _fill(log, 5, ts=1)
    assert log.enforce_retention(10**12) == 0 and len(log.segments) == 1
    log.close()


def test_retention_by_size(tmp_path):
    config = LogConfig(segment_bytes=2_000, index_interval_bytes=200, retention_bytes=5_000, retention_ms=-1)
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    _fill(log, 100)
    sizes = [s.size for s in log.segments]
    deleted = log.enforce_retention(10**15)
    assert deleted > 0
    # as Kafka: delete while what remains still holds retention.bytes
    assert log.size_bytes >= 5_000 > log.size_bytes - log.segments[0].size
    assert sum(sizes) - sum(sizes[:deleted]) == log.size_bytes
    assert log.log_start_offset == log.segments[0].base_offset
    log.close()


def test_set_log_start_offset(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    batches = _fill(log, 60)
    target_seg = log.segments[4]
    mid = target_seg.base_offset + 2
    n = len(log.segments)
    log.set_log_start_offset(mid)
    assert log.log_start_offset == mid and len(log.segments) == n - 4
    with pytest.raises(OffsetOutOfRange):
        log.read(mid - 1, 100)
    assert _ranges(log.read(mid, 1))[0][1] >= mid
    log.set_log_start_offset(mid - 1)  # not an advance: ignored
    assert log.log_start_offset == mid
    with pytest.raises(OffsetOutOfRange):
        log.set_log_start_offset(log.log_end_offset + 1)
    log.close()
    log = PartitionLog.open(path, SMALL, 0)
    assert log.log_start_offset == mid
    assert log.offset_for_timestamp(0)[0] >= mid
    log.close()


def test_truncate_to(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    batches = _fill(log, 60)
    base, last, _ = batches[30]
    log.truncate_to(last)  # inside (or at the end of) batch 30: the whole batch goes
    assert log.log_end_offset == base
    assert _bytes(log.read(0, 10**9)) == b"".join(b[2] for b in batches[:30])
    assert _append(log, _batch(1)) == (base, base)
    log.truncate_to(10**9)  # beyond the end: nothing happens
    assert log.log_end_offset == base + 1
    log.close()
    log = PartitionLog.open(path, SMALL, 0)
    assert log.log_end_offset == base + 1
    log.set_log_start_offset(20)
    log.truncate_to(5)  # below the start: the log restarts at 5
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (5, 5, 0)
    assert _append(log, _batch(2)) == (5, 6)
    log.close()
    log = PartitionLog.open(path, SMALL, 0)
    assert (log.log_start_offset, log.log_end_offset) == (5, 7)
    log.close()


def test_delete_removes_the_directory(tmp_path):
    path = tmp_path / "t-0"
    log = PartitionLog.open(path, SMALL, 0)
    _fill(log, 20)
    s = log.read(0, 100)[0]
    log.delete(now_ms=0)
    assert not path.exists()
    assert os.pread(s.fd, 10, s.position) != b""  # still readable until cleanup
    assert log.cleanup_deleted(SMALL.file_delete_delay_ms) == len(log.segments)


# -- config --------------------------------------------------------------------------------


def test_log_config_from_kafka_properties():
    c = LogConfig.from_properties({"segment.bytes": "1024", "retention.ms": "-1", "flush.messages": "1",
                                   "flush.ms": str(2**63 - 1), "cleanup.policy": "compact, delete",
                                   "unrelated.setting": "x"})
    assert (c.segment_bytes, c.retention_ms, c.flush_messages, c.flush_ms) == (1024, -1, 1, None)
    assert c.cleanup_policy == "compact,delete"
    assert LogConfig().max_message_bytes == 1048588 and LogConfig().segment_bytes == 1 << 30
    for bad in ({"segment.bytes": "abc"}, {"segment.bytes": "10"}, {"cleanup.policy": "nope"},
                {"flush.messages": "0"}):
        with pytest.raises(InvalidConfig):
            LogConfig.from_properties(bad)


# -- kill -9 of a real process (R1) ---------------------------------------------------------

_WRITER = """
import sys
from pathlib import Path
from oncelog.protocol import records as R
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog
log = PartitionLog.open(Path(sys.argv[1]), LogConfig(segment_bytes=50_000, index_interval_bytes=500), 0)
i = 0
while True:
    buf = R.build_batch([(b"k", b"%d" % i * 20, ())] * 3, timestamp_ms=i)
    base, last = log.append(buf, R.parse_header(buf), i)
    print(last, flush=True)  # acknowledged
    i += 1
"""


def test_acknowledged_appends_survive_kill_9(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "t-0"
    child = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        acked = -1
        for line in child.stdout:
            acked = int(line)
            if acked >= 6_000:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    log = PartitionLog.open(path, LogConfig(segment_bytes=50_000, index_interval_bytes=500), 0)
    assert log.log_end_offset > acked
    data = log.read_batches(0, 10**9)
    assert R.valid_prefix_end(data, verify_crc=True) == len(data)
    offsets = [r.offset for p, _ in R.iter_batches(data) for r in R.iter_records(data[p:])]
    assert offsets == list(range(log.log_end_offset))
    _append(log, _batch())
    log.close()


def test_truncated_segments_stay_readable_for_the_delay_counted_from_the_next_cleanup(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL, 0)
    _fill(log, 40)
    tail = log.read(log.segments[-2].base_offset, 10**9)
    log.truncate_to(log.segments[-3].base_offset)
    assert log.cleanup_deleted(10**6) == 0  # deadline set now: 10**6 + delay
    assert all(os.pread(s.fd, s.length, s.position) for s in tail)
    assert log.cleanup_deleted(10**6 + SMALL.file_delete_delay_ms) == 2
    log.close()

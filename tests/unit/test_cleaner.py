"""Log compaction (R4): last value per key, tombstones after delete.retention.ms, transactions
(aborted data dropped, markers kept while their data lives, nothing at or past the LSO), every
producer's last batch whole, offsets preserved, and crash safety of the segment swap at every
step (recover completes or undoes it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import records as R
from oncelog.storage.engines.local import cleaner as C
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog

NOW = 1_700_000_000_000
DAY = 86_400_000
CFG = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy="compact", delete_retention_ms=DAY)


def _open(path: Path, cfg: LogConfig = CFG) -> PartitionLog:
    return PartitionLog.open(path, cfg, NOW)


def _append(plog: PartitionLog, recs: list[tuple[bytes | None, bytes | None]], ts: int = NOW, **kw: object) -> int:
    batch = R.build_batch([(k, v, ()) for k, v in recs], timestamp_ms=ts, **kw)  # type: ignore[arg-type]
    return plog.append(batch, R.parse_header(batch), ts)[0]


def _marker(plog: PartitionLog, pid: int, commit: bool, ts: int = NOW, epoch: int = 0) -> int:
    batch = R.build_control_batch(commit=commit, producer_id=pid, producer_epoch=epoch, coordinator_epoch=0, timestamp_ms=ts)
    return plog.append(batch, R.parse_header(batch), ts)[0]


def _roll(plog: PartitionLog) -> None:
    _append(plog, [(b"filler", b"x" * 700)])  # bigger than a segment: the next append rolls


def _contents(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for h, data in plog.iter_batches():
        if h.is_control:
            out.append((h.base_offset, b"<marker>", None))
            continue
        out.extend((r.offset, r.key, r.value) for r in R.iter_records(data))
    return out


def _keys_at(plog: PartitionLog) -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for off, k, _ in _contents(plog):
        if k is not None:
            out.setdefault(k, []).append(off)
    return out


def test_many_updates_per_key_shrink_to_the_last_values(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    latest = {}
    for i in range(300):
        key = b"k%d" % (i % 10)
        latest[key] = (_append(plog, [(key, b"v%d" % i)]), b"v%d" % i)
    _roll(plog)
    before_segments, before_bytes = len(plog.segments), plog.size_bytes
    res = C.Cleaner().clean(plog, plog.log_end_offset, NOW)
    assert res is not None and res.segments_after < res.segments_before and res.bytes_after < res.bytes_before
    assert len(plog.segments) < before_segments and plog.size_bytes < before_bytes / 5
    contents = _contents(plog)
    for key, (off, value) in latest.items():
        assert (off, key, value) in contents
    assert sum(1 for _, k, _ in contents if k != b"filler") == 10, "exactly the last value of each key"
    assert plog.log_start_offset == 0 and plog.log_end_offset == 301
    plog.read(0, 1 << 20)  # offsets in the removed ranges are still readable (next batch)
    plog.close()
    reopened = _open(tmp_path / "t-0")
    assert _contents(reopened) == contents
    reopened.close()


def test_nothing_to_do_without_inactive_segments_or_dirt(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"1"), (b"a", b"2")])
    cl = C.Cleaner()
    assert cl.clean(plog, plog.log_end_offset, NOW) is None, "only the active segment"
    _roll(plog)
    assert cl.clean(plog, plog.log_end_offset, NOW) is not None
    assert cl.clean(plog, plog.log_end_offset, NOW) is None, "clean already, nothing due"
    delete_cfg = LogConfig(segment_bytes=600, cleanup_policy="delete")
    other = _open(tmp_path / "u-0", delete_cfg)
    _append(other, [(b"a", b"1")])
    _roll(other)
    _append(other, [(b"a", b"2")])
    assert cl.clean(other, other.log_end_offset, NOW) is None, "not a compacted topic"
    plog.close()
    other.close()


def test_tombstones_stay_for_delete_retention_then_go(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"1"), (b"b", b"1")])
    _append(plog, [(b"a", None)], ts=NOW + 1000)
    _roll(plog)
    cl = C.Cleaner()
    cl.clean(plog, plog.log_end_offset, NOW + 2000)
    assert _keys_at(plog)[b"a"] == [2], "the tombstone stays; the value it deletes goes"
    assert cl.clean(plog, plog.log_end_offset, NOW + 1000 + DAY - 1) is None
    assert cl.clean(plog, plog.log_end_offset, NOW + 1000 + DAY) is not None, "due: the tombstone expired"
    keys = _keys_at(plog)
    assert b"a" not in keys and keys[b"b"] == [1]
    plog.close()


def test_aborted_transactions_go_committed_ones_stay(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"plain")])
    _append(plog, [(b"a", b"committed")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    _append(plog, [(b"b", b"aborted")], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    _append(plog, [(b"a", b"aborted-a")], producer_id=8, producer_epoch=0, base_sequence=1, transactional=True)
    _marker(plog, 8, commit=False)
    _marker(plog, 7, commit=True)
    _append(plog, [(b"c", b"1")], producer_id=8, producer_epoch=1, base_sequence=0, transactional=True)
    _marker(plog, 8, commit=True, epoch=1)
    _roll(plog)
    C.Cleaner().clean(plog, plog.log_end_offset, NOW + 10)
    contents = _contents(plog)
    values = [v for _, k, v in contents if k not in (b"<marker>", b"filler")]
    assert values == [b"committed", b"1"], "aborted records go and never supersede the committed value"
    markers = [off for off, k, _ in contents if k == b"<marker>"]
    assert len(markers) == 3, "markers are younger than delete.retention.ms (and the last of their producer)"
    plog.close()


def test_markers_without_data_go_after_delete_retention(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    _marker(plog, 7, commit=True)
    _append(plog, [(b"a", b"2")], producer_id=7, producer_epoch=0, base_sequence=1, transactional=True)
    _marker(plog, 7, commit=True)
    _append(plog, [(b"a", b"3")])
    _roll(plog)
    C.Cleaner().clean(plog, plog.log_end_offset, NOW + DAY)
    contents = _contents(plog)
    assert [(o, k) for o, k, _ in contents if k == b"<marker>"] == [(3, b"<marker>")], (
        "the first marker's data is gone, and so is it; the second stays with its producer's last data batch")
    assert [v for _, k, v in contents if k == b"a"] == [b"3"]
    plog.close()


def test_open_transaction_and_records_above_the_lso_are_not_touched(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"1")])
    _roll(plog)
    lso = _append(plog, [(b"a", b"2")], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    _roll(plog)
    _append(plog, [(b"a", b"3")])
    _roll(plog)
    C.Cleaner().clean(plog, lso, NOW, force=True)
    assert [v for _, k, v in _contents(plog) if k == b"a"] == [b"1", b"2", b"3"]
    plog.close()


def test_a_producers_last_batch_stays_as_an_empty_header(tmp_path: Path) -> None:
    """As Kafka: the producer state rebuilt from the log still knows producer 5's epoch and last
    sequence; producer 6's transactional batch (its marker is not in the range) keeps its header
    too, so a rebuilt producer state still sees where its transaction started."""
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"1"), (b"b", b"1")], producer_id=5, producer_epoch=2, base_sequence=0,
            compression=R.COMPRESSION_GZIP)
    _append(plog, [(b"c", b"1")], producer_id=6, producer_epoch=0, base_sequence=0, transactional=True)
    _append(plog, [(b"a", b"2"), (b"b", b"2"), (b"c", b"2")])
    _roll(plog)
    C.Cleaner().clean(plog, plog.log_end_offset, NOW + 2 * DAY)
    batches = [h for h, _ in plog.iter_batches()]
    h = batches[0]
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.records_count) == (5, 2, 0, 1, 0)
    assert h.compression == R.COMPRESSION_NONE, "an empty batch is written uncompressed"
    assert (batches[1].producer_id, batches[1].is_transactional, batches[1].records_count) == (6, True, 0)
    assert [r.key for _, data in plog.iter_batches() for r in ([] if _.is_control else R.iter_records(data))][:3] == [
        b"a", b"b", b"c"]
    plog.close()


def test_an_aborted_producers_last_data_batch_keeps_its_sequence(tmp_path: Path) -> None:
    """A producer's last batch is its last *data* batch: a marker carries no sequence, so were
    the marker the batch kept, a producer whose last transaction aborted would come back from the
    log with no last sequence (and its next batch, sequence 2, be refused as out of order)."""
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"x")], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    _append(plog, [(b"a", b"y")], producer_id=8, producer_epoch=0, base_sequence=1, transactional=True)
    _marker(plog, 8, commit=False)
    _append(plog, [(b"b", b"1")])
    _roll(plog)
    C.Cleaner().clean(plog, plog.log_end_offset, NOW + 2 * DAY)
    hs = [h for h, _ in plog.iter_batches() if h.producer_id == 8]
    assert [(h.is_control, h.base_offset, h.base_sequence, h.records_count) for h in hs] == [
        (False, 1, 1, 0), (True, 2, -1, 1)], "the aborted data goes, its last batch's header and marker stay"
    plog.close()


def test_rewritten_batches_keep_offsets_producer_fields_and_codec(tmp_path: Path) -> None:
    plog = _open(tmp_path / "t-0")
    _append(plog, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], producer_id=5, producer_epoch=2, base_sequence=0,
            compression=R.COMPRESSION_LZ4)
    _append(plog, [(b"b", b"2")], producer_id=5, producer_epoch=2, base_sequence=3)
    _roll(plog)
    C.Cleaner().clean(plog, plog.log_end_offset, NOW)
    h, data = next(iter(plog.iter_batches()))
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.compression) == (5, 2, 0, R.COMPRESSION_LZ4)
    assert [(r.offset, r.key) for r in R.iter_records(data)] == [(0, b"a"), (2, b"c")]
    plog.close()


# -- crash safety ------------------------------------------------------------------------------


def _dirty_log(path: Path) -> tuple[PartitionLog, list]:
    plog = _open(path)
    for i in range(120):
        _append(plog, [(b"k%d" % (i % 4), b"v%d" % i)])
    _roll(plog)
    return plog, _contents(plog)


def _cleaned_contents(path: Path) -> list:
    plog, _ = _dirty_log(path)
    C.Cleaner().clean(plog, plog.log_end_offset, NOW)
    out = _contents(plog)
    plog.close()
    return out


@pytest.mark.parametrize("crash_at", ["built", "committed", "old_renamed", "index_moved", "log_moved"])
def test_crash_during_swap_leaves_old_or_new_never_a_mix(tmp_path: Path, crash_at: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected_clean = _cleaned_contents(tmp_path / "ref-0")
    plog, original = _dirty_log(tmp_path / "t-0")
    cl = C.Cleaner()
    plan = cl.plan(plog, plog.log_end_offset, NOW)
    assert plan is not None
    cl.build(plan)

    class Crash(Exception):
        pass

    real_replace, real_rename = os.replace, os.rename
    moves = {"n": 0}

    def crashing_replace(src: object, dst: object) -> None:
        if crash_at == "index_moved" and str(dst).endswith(".log"):
            raise Crash()
        real_replace(src, dst)  # type: ignore[arg-type]
        if crash_at == "log_moved" and str(dst).endswith(".log"):
            raise Crash()

    def crashing_rename(src: object, dst: object) -> None:
        real_rename(src, dst)  # type: ignore[arg-type]
        if crash_at == "committed" and str(dst).endswith(".swap"):
            raise Crash()
        if crash_at == "old_renamed" and str(dst).endswith(".deleted"):
            moves["n"] += 1
            if moves["n"] == 3:  # the first segment's three files: mid-way through the group
                raise Crash()

    if crash_at != "built":
        monkeypatch.setattr(os, "replace", crashing_replace)
        monkeypatch.setattr(os, "rename", crashing_rename)
        with pytest.raises(Crash):
            cl.commit(plan)
        monkeypatch.undo()
    # the process dies here: nothing is closed cleanly
    swaps = C.recover(tmp_path)
    reopened = _open(tmp_path / "t-0")
    got = _contents(reopened)
    if crash_at == "built":
        assert swaps == 0 and got == original
    else:
        assert swaps <= 1 and got == expected_clean
    assert not (tmp_path / "t-0" / C.TMP_DIR).exists()
    assert not list((tmp_path / "t-0").glob("*.swap"))
    reopened.close()


# -- property -----------------------------------------------------------------------------------

ops = st.lists(
    st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.none() | st.binary(min_size=1, max_size=30),
              st.booleans()),
    min_size=1, max_size=150,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops, st.integers(200, 2000))
def test_compacted_log_is_exactly_the_latest_record_of_each_key(tmp_path_factory: pytest.TempPathFactory,
                                                                writes: list, segment_bytes: int) -> None:
    path = tmp_path_factory.mktemp("p") / "t-0"
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=64, cleanup_policy="compact", delete_retention_ms=DAY)
    plog = _open(path, cfg)
    written: list[tuple[int, bytes, bytes | None]] = []
    for key, value, big in writes:
        value = value if not big or value is None else value * 10
        written.append((_append(plog, [(key, value)]), key, value))
    active_base = plog.segments[-1].base_offset  # the cleaner never sees the active segment
    latest = {k: o for o, k, _ in written if o < active_base}
    expected = [(o, k, v) for o, k, v in written if o >= active_base or (latest[k] == o and v is not None)]
    C.Cleaner().clean(plog, plog.log_end_offset, NOW + 2 * DAY, force=True)  # every tombstone is old
    assert plog.segments[-1].base_offset == active_base
    assert _contents(plog) == expected, "exactly the latest record of each key (old tombstones gone)"
    present = {o for o, _, _ in expected}
    plog.close()
    reopened = _open(path, cfg)
    assert [o for o, _, _ in _contents(reopened)] == sorted(present)
    reopened.close()


def test_time_retention_never_deletes_a_compact_only_log(tmp_path: Path) -> None:
    """__consumer_offsets must not lose committed offsets to retention.ms (R3, R4)."""
    plog = _open(tmp_path / "t-0", LogConfig(segment_bytes=600, cleanup_policy="compact", retention_ms=1000))
    _append(plog, [(b"a", b"1")])
    _roll(plog)
    _append(plog, [(b"b", b"1")])
    assert plog.enforce_retention(NOW + DAY) == 0 and plog.log_start_offset == 0
    both = _open(tmp_path / "u-0", LogConfig(segment_bytes=600, cleanup_policy="compact,delete", retention_ms=1000))
    _append(both, [(b"a", b"1")])
    _roll(both)
    _append(both, [(b"b", b"1")])
    assert both.enforce_retention(NOW + DAY) >= 1
    plog.close()
    both.close()

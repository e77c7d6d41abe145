"""Log compaction on the PostgreSQL engine (storage/engines/postgres/log.py ``compact``; issue 15): the same
keep rules as the local cleaner (storage/keep_rules.py), checked against it batch for batch on
random logs, and what a compacted log must still give: last value per key, committed view,
producer state, aborted index, fetches over gaps, and fencing of a deposed leader."""

from __future__ import annotations

import itertools
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_store import Store
from oncelog.broker.partitions.partition import Partition
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.errors import LeaderFenced
from oncelog.protocol import records as R
from oncelog.storage.engines.local.cleaner import Cleaner
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog
from oncelog.types import TopicPartition

NOW = 10_000_000
#: one batch per local segment (segment.bytes below any batch), so the local cleaner's range (all
#: but the active segment) is the PostgreSQL engine's (all but the newest batch)
COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=64, index_interval_bytes=200, retention_ms=-1,
                    delete_retention_ms=1_000)
_names = itertools.count()


class Scenario:
    """Builds batches: plain, idempotent and transactional producers, tombstones, markers."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.seq: dict[int, int] = {}
        self.open: dict[int, int] = {}  # producer id -> index of its transaction's first batch

    def data(self, recs: list[tuple[bytes | None, bytes | None]], ts: int, pid: int = -1, txn: bool = False) -> None:
        seq = -1
        if pid >= 0:
            seq = self.seq.get(pid, 0)
            self.seq[pid] = seq + len(recs)
        if txn:
            self.open.setdefault(pid, len(self.batches))
        self.batches.append(R.build_batch([(k, v, ()) for k, v in recs], timestamp_ms=ts, producer_id=pid,
                                          producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                                          transactional=txn))

    def marker(self, pid: int, commit: bool, ts: int) -> None:
        self.open.pop(pid, None)
        self.batches.append(R.build_control_batch(commit=commit, producer_id=pid, producer_epoch=0,
                                                  coordinator_epoch=3, timestamp_ms=ts))


def _write(logs, batches: list[bytes], epoch: int) -> None:
    for buf in batches:
        h = R.parse_header(buf)
        got = {log.append(buf, h, NOW, leader_epoch=epoch) if isinstance(log, PartitionLog) else log.append(buf, h, NOW)
               for log in logs}
        assert len(got) == 1, got


def _lso(logs_batches: list[tuple[R.BatchHeader, bytes]], end: int) -> int:
    open_first: dict[int, int] = {}
    for h, _ in logs_batches:
        if h.is_control:
            open_first.pop(h.producer_id, None)
        elif h.is_transactional:
            open_first.setdefault(h.producer_id, h.base_offset)
    return min(open_first.values(), default=end)


def committed_table(log) -> dict[bytes, bytes]:
    """What a read_committed consumer that applies every record as an upsert, in offset order,
    ends with (a null value deletes its key)."""
    committed: list[R.Record] = []
    pending: dict[int, list[R.Record]] = {}
    for h, data in log.iter_batches():
        if h.is_control:
            recs = pending.pop(h.producer_id, [])
            if R.read_control_marker(data).commit:
                committed.extend(recs)
        elif h.is_transactional:
            pending.setdefault(h.producer_id, []).extend(R.iter_records(data))
        else:
            committed.extend(R.iter_records(data))
    table: dict[bytes, bytes] = {}
    for r in sorted(committed, key=lambda r: r.offset):
        if r.key is None:
            continue
        if r.value is None:
            table.pop(r.key, None)
        else:
            table[r.key] = r.value
    return table


def fetched_table(part: Partition) -> dict[bytes, bytes]:
    """The same table as a read_committed consumer builds it through the fetch path: batches up
    to the LSO, filtered with the aborted transactions the partition answers (its index), as
    Kafka's consumer does."""
    import heapq

    records: list[R.Record] = []
    offset, lso = part.log_start_offset, part.last_stable_offset
    while offset < lso:
        res = part.read(offset, 1 << 20, read_committed=True)
        chunk = b"".join(res.slices)  # type: ignore[arg-type]
        if not chunk:
            break
        aborted = [(a.first_offset, a.producer_id) for a in res.aborted]
        heapq.heapify(aborted)
        aborting: set[int] = set()
        for _pos, h in R.iter_batches(chunk):
            data = chunk[_pos:_pos + h.size]
            while aborted and aborted[0][0] <= h.last_offset:
                aborting.add(heapq.heappop(aborted)[1])
            offset = h.next_offset
            if h.is_control:
                if not R.read_control_marker(data).commit:
                    aborting.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborting:
                continue
            records.extend(R.iter_records(data))
    table: dict[bytes, bytes] = {}
    for r in records:
        if r.key is not None:
            if r.value is None:
                table.pop(r.key, None)
            else:
                table[r.key] = r.value
    return table


def _state(part: Partition, full: bool = True) -> tuple:
    producers = {pid: (e.to_json() if full else (e.epoch, e.last_seq, e.coordinator_epoch, e.current_txn_first_offset))
                 for pid, e in part.producers.entries.items()}
    return producers, part.last_stable_offset, list(part.aborted.entries) if full else None


def _recover(log, tmp: Path, name: str) -> Partition:
    path = tmp / name
    path.mkdir()
    return Partition.recover(TopicPartition("t", 0), log, path, log.config)


@pytest.fixture
def compactor(store: Store):
    conn = StoreConnection(store.connect, "compactor")
    yield conn
    conn.close()


# -- the keep rules, on the same batches, on both engines ---------------------------------------

keys = st.sampled_from([b"a", b"b", b"c", b"d", None])
value = st.one_of(st.none(), st.binary(min_size=1, max_size=8))
rec = st.tuples(keys, value)
op = st.one_of(
    st.tuples(st.just("plain"), st.lists(rec, min_size=1, max_size=4), st.integers(-1, 2)),
    st.tuples(st.just("txn"), st.lists(rec, min_size=1, max_size=4), st.integers(10, 12)),
    st.tuples(st.just("end"), st.booleans(), st.integers(10, 12)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=30), old=st.floats(0, 1))
def test_pg_compaction_keeps_what_the_local_cleaner_keeps(store, compactor, ops, old) -> None:
    sc = Scenario()
    n = len(ops)
    for i, o in enumerate(ops):
        # the first ``old`` part of the log is older than delete.retention.ms
        ts = NOW - 5_000 if i < old * n else NOW - 10
        if o[0] == "plain":
            sc.data(o[1], ts, pid=o[2] if o[2] >= 0 else -1)
        elif o[0] == "txn":
            sc.data(o[1], ts, pid=o[2], txn=True)
        elif o[2] in sc.open:
            sc.marker(o[2], o[1], ts)
    with tempfile.TemporaryDirectory() as tmp:
        local = PartitionLog.open(Path(tmp) / "t-0", COMPACT, 0)
        pg = store.lead(f"compact{next(_names)}", config=COMPACT)
        try:
            _write([local, pg], sc.batches, pg.leader_epoch)
            before = committed_table(pg)
            part_before = _recover(pg, Path(tmp), "before")
            state_before = _state(part_before, full=False)
            fetched_before = fetched_table(part_before)
            upper = _lso(list(pg.iter_batches()), pg.log_end_offset)
            Cleaner().clean(local, upper, NOW, force=True)
            pg.compact(compactor, upper, NOW, force=True)
            assert [d for _h, d in local.iter_batches()] == [d for _h, d in pg.iter_batches()]
            assert committed_table(pg) == before
            after_pg = _recover(pg, Path(tmp), "pg")
            assert _state(after_pg) == _state(_recover(local, Path(tmp), "local"))
            assert _state(after_pg, full=False) == state_before
            assert fetched_table(after_pg) == fetched_before  # the fetch path, with the rebuilt aborted index
        finally:
            local.close()


# -- each rule, and what must hold around it -----------------------------------------------------


def test_compaction_keeps_last_value_per_key_and_rewrites_in_place(store, compactor) -> None:
    pg = store.lead("lastvalue", config=COMPACT)
    sc = Scenario()
    for i in range(20):
        sc.data([(b"k%d" % (i % 3), b"v%d" % i), (None, b"nokey%d" % i)], NOW - 10)
    sc.data([(b"z", b"last")], NOW - 10)  # the newest batch: never touched
    _write([pg], sc.batches, pg.leader_epoch)
    rows_before = store.conn.execute("SELECT count(*), sum(size) FROM oncelog_batch WHERE partition_id = %s",
                                     (pg.partition_id,)).fetchone()
    res = pg.compact(compactor, pg.log_end_offset, NOW, page_rows=4)
    assert res is not None and res.batches_before == 20 and res.pages >= 5
    recs = [(r.offset, r.key, r.value) for _h, d in pg.iter_batches() for r in R.iter_records(d)]
    keyed = [(o, k, v) for o, k, v in recs if k is not None]
    assert keyed == [(34, b"k2", b"v17"), (36, b"k0", b"v18"), (38, b"k1", b"v19"), (40, b"z", b"last")]
    assert len([1 for _o, k, _v in recs if k is None]) == 20  # records without a key all stay
    # every batch still had a keyless record: rewritten in place, same base and last offsets
    heads = [(h.base_offset, h.last_offset) for h, _d in pg.iter_batches()]
    assert heads == [(2 * i, 2 * i + 1) for i in range(20)] + [(40, 40)]
    rows_after = store.conn.execute("SELECT count(*), sum(size) FROM oncelog_batch WHERE partition_id = %s",
                                    (pg.partition_id,)).fetchone()
    assert rows_after[0] == rows_before[0] and rows_after[1] < rows_before[1]
    # nothing more to do: the next pass finds nothing dirty
    assert pg.compact(compactor, pg.log_end_offset, NOW) is None


def test_fetch_inside_a_removed_batch_serves_the_next_batch(store, compactor) -> None:
    pg = store.lead("gaps", config=COMPACT)
    sc = Scenario()
    for i in range(6):
        sc.data([(b"k", b"v%d" % i), (b"k", b"w%d" % i)], NOW - 10)  # offsets 2i, 2i+1
    sc.data([(b"other", b"x")], NOW - 10)  # 12
    sc.data([(b"k", b"final")], NOW - 10)  # 13: supersedes everything before
    sc.data([(b"tail", b"t")], NOW - 10)  # 14, the newest
    _write([pg], sc.batches, pg.leader_epoch)
    pg.compact(compactor, pg.log_end_offset, NOW, force=True)
    bases = [h.base_offset for h, _d in pg.iter_batches()]
    assert bases == [12, 13, 14]
    for offset in (0, 1, 5, 11):
        (chunk,) = pg.read(offset, 10_000, None)
        assert R.parse_header(chunk).base_offset == 12, offset
    (chunk,) = pg.read(3, 1, None)  # min one batch: the next whole batch
    assert [h.base_offset for _p, h in R.iter_batches(chunk)] == [12]
    assert [h.base_offset for h in pg.iter_headers(0)] == [12, 13, 14]
    assert pg.epoch_at(5) == pg.leader_epoch


def test_aborted_records_go_markers_stay_and_producers_keep_their_last_batch(store, compactor) -> None:
    pg = store.lead("txns", config=COMPACT)
    sc = Scenario()
    sc.data([(b"a", b"1")], NOW - 5_000, pid=1)  # 0
    sc.data([(b"a", b"aborted")], NOW - 5_000, pid=2, txn=True)  # 1
    sc.marker(2, False, NOW - 5_000)  # 2: old abort marker, its data gone -> goes (unless last of pid 2)
    sc.data([(b"a", b"2")], NOW - 5_000, pid=1)  # 3: supersedes offset 0; pid 1's last batch
    sc.data([(b"b", b"committed")], NOW - 5_000, pid=3, txn=True)  # 4
    sc.marker(3, True, NOW - 10)  # 5: its transaction kept a record -> stays
    sc.data([(b"b", b"x")], NOW - 10, pid=4, txn=True)  # 6
    sc.data([(b"b", b"y")], NOW - 10, pid=4, txn=True)  # 7
    sc.marker(4, False, NOW - 10)  # 8: recent abort marker: stays (delete.retention.ms)
    sc.data([(b"c", b"tail")], NOW - 10)  # 9: the newest
    _write([pg], sc.batches, pg.leader_epoch)
    with tempfile.TemporaryDirectory() as tmp:
        part = _recover(pg, Path(tmp), "before")
        before = _state(part, full=False)
        table = committed_table(pg)
        assert table == {b"a": b"2", b"b": b"committed", b"c": b"tail"}
        assert fetched_table(part) == table  # the fetch path drops the aborted records too
        pg.compact(compactor, pg.log_end_offset, NOW, force=True)
        got = {h.base_offset: (h.is_control, [(r.key, r.value) for r in R.iter_records(d)] if not h.is_control else None)
               for h, d in pg.iter_batches()}
        assert got == {
            1: (False, []),  # pid 2's last data batch: aborted, its header alone stays (epoch, sequence)
            2: (True, None),  # and so its marker
            3: (False, [(b"a", b"2")]),  # supersedes offset 0
            4: (False, [(b"b", b"committed")]),
            5: (True, None),  # its transaction kept a record
            7: (False, []),  # pid 4's last data batch (aborted): header alone; 6 goes
            8: (True, None),
            9: (False, [(b"c", b"tail")]),
        }
        assert committed_table(pg) == table
        after = _recover(pg, Path(tmp), "after")
        assert _state(after, full=False) == before
        assert fetched_table(after) == table


def test_a_deposed_leader_cannot_compact(store, pg_dsn, compactor) -> None:
    pg = store.lead("fenced", config=COMPACT)
    sc = Scenario()
    for i in range(10):
        sc.data([(b"k", b"v%d" % i)], NOW - 10)
    _write([pg], sc.batches, pg.leader_epoch)
    snapshot = store.conn.execute("SELECT base_offset, data FROM oncelog_batch WHERE partition_id = %s "
                                  "ORDER BY base_offset", (pg.partition_id,)).fetchall()
    other = Store(pg_dsn, broker_id=2)
    try:
        other.lead("fenced", config=COMPACT)  # a new leader, a new epoch
        with pytest.raises(LeaderFenced):
            pg.compact(compactor, pg.log_end_offset, NOW, force=True)
        assert store.conn.execute("SELECT base_offset, data FROM oncelog_batch WHERE partition_id = %s "
                                  "ORDER BY base_offset", (pg.partition_id,)).fetchall() == snapshot
    finally:
        other.close()


def test_open_transaction_and_lag_bound_the_range(store, compactor) -> None:
    cfg = LogConfig(cleanup_policy="compact", retention_ms=-1, delete_retention_ms=1_000, min_compaction_lag_ms=1_000)
    pg = store.lead("bounds", config=cfg)
    sc = Scenario()
    sc.data([(b"k", b"1")], NOW - 5_000)  # 0
    sc.data([(b"k", b"2")], NOW - 5_000)  # 1
    sc.data([(b"k", b"3")], NOW - 10)  # 2: younger than min.compaction.lag.ms: the range ends here
    sc.data([(b"k", b"4")], NOW - 5_000)  # 3
    sc.data([(b"k", b"5")], NOW - 5_000)  # 4
    _write([pg], sc.batches, pg.leader_epoch)
    pg.compact(compactor, pg.log_end_offset, NOW, force=True)
    assert [h.base_offset for h, _d in pg.iter_batches()] == [1, 2, 3, 4]
    pg2 = store.lead("bounds2", config=COMPACT)
    _write([pg2], sc.batches, pg2.leader_epoch)
    pg2.compact(compactor, 2, NOW, force=True)  # upper (the LSO) at 2
    assert [h.base_offset for h, _d in pg2.iter_batches()] == [1, 2, 3, 4]


@pytest.mark.parametrize("n", [2_000])
def test_pass_time_figure(store, compactor, n, capsys) -> None:
    """Not a check of speed: prints rows/bytes before and after, and the time of a pass (the
    figure in docs/CLUSTER.md)."""
    import time

    pg = store.lead("figure", config=COMPACT)
    rnd = random.Random(7)
    sc = Scenario()
    for i in range(n):
        sc.data([(b"group-%d" % rnd.randrange(20), b"x" * 60)], NOW - 10)
    _write([pg], sc.batches, pg.leader_epoch)
    q = "SELECT count(*), sum(size) FROM oncelog_batch WHERE partition_id = %s"
    rows0, bytes0 = store.conn.execute(q, (pg.partition_id,)).fetchone()
    t = time.perf_counter()
    res = pg.compact(compactor, pg.log_end_offset, NOW, force=True)
    took = time.perf_counter() - t
    rows1, bytes1 = store.conn.execute(q, (pg.partition_id,)).fetchone()
    assert rows1 <= 21 and res is not None
    with capsys.disabled():
        print(f"\nFIGURE pass over {n} batches: {took:.2f}s; rows {rows0} -> {rows1}, bytes {bytes0} -> {bytes1}, "
              f"{res.pages} transactions")


def test_batches_left_above_the_lso_stay_dirty_for_the_next_pass(store, compactor) -> None:
    """A pass bounded by an open transaction remembers where its range ended, not the log's
    newest batch: once the transaction ends, the next (unforced) pass cleans what lay above it."""
    pg = store.lead("dirty", config=COMPACT)
    sc = Scenario()
    for i in range(10):
        sc.data([(b"k", b"v%d" % i)], NOW - 10)  # 0..9
    sc.data([(b"t", b"x")], NOW - 10, pid=10, txn=True)  # 10: open
    for i in range(10):
        sc.data([(b"k", b"w%d" % i)], NOW - 10)  # 11..20
    sc.data([(b"z", b"newest")], NOW - 10)  # 21
    _write([pg], sc.batches, pg.leader_epoch)
    assert pg.compact(compactor, 10, NOW) is not None  # the LSO: 10
    assert [h.base_offset for h, _d in pg.iter_batches()] == [9, 10] + list(range(11, 22))
    sc2 = Scenario()
    sc2.marker(10, True, NOW - 10)  # 22
    sc2.data([(b"z", b"newer")], NOW - 10)  # 23
    _write([pg], sc2.batches, pg.leader_epoch)
    assert pg.compact(compactor, pg.log_end_offset, NOW) is not None
    assert [h.base_offset for h, _d in pg.iter_batches()] == [10, 20, 21, 22, 23]


def test_a_page_is_bounded_by_bytes_too(store, compactor, monkeypatch) -> None:
    from oncelog.storage.engines.postgres import log as pg_log

    monkeypatch.setattr(pg_log, "COMPACT_PAGE_BYTES", 1_000)
    pg = store.lead("pagebytes", config=COMPACT)
    sc = Scenario()
    for i in range(30):
        sc.data([(b"k%d" % (i % 2), b"v" * 100 + b"%d" % i), (None, b"keep")], NOW - 10)  # ~190 bytes each
    sc.data([(b"z", b"newest")], NOW - 10)
    _write([pg], sc.batches, pg.leader_epoch)
    res = pg.compact(compactor, pg.log_end_offset, NOW, page_rows=500)
    assert res is not None and res.batches_before == 30 and res.pages >= 30 * 190 // 1_000
    keyed = [(r.offset, r.key) for _h, d in pg.iter_batches() for r in R.iter_records(d) if r.key is not None]
    assert keyed == [(56, b"k0"), (58, b"k1"), (60, b"z")]

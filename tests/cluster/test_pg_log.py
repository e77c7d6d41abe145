"""The PostgreSQL partition log (storage/engines/postgres/log.py) and group commit (storage/engines/postgres/group_commit.py),
against a real PostgreSQL server (issue 15): byte-exact round trips, offsets assigned by the
leader, fencing by leader epoch, one transaction for many partitions, retention by log start,
and nothing acknowledged lost across a crash restart of PostgreSQL. Every wait is bounded."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from cluster_store import Store
from oncelog.cluster import leadership, schema
from oncelog.cluster.errors import LeaderFenced, LogEndMoved, StoreUnavailable
from oncelog.storage.engines.postgres.log import PgPartitionLog
from oncelog.protocol import records as R
from oncelog.protocol.errors import OffsetOutOfRange
from oncelog.storage.config import LogConfig


def _batch(n: int = 3, ts: int = 1_000, size: int = 30, **kw) -> bytes:
    return R.build_batch([(b"k", b"v" * size, ())] * n, timestamp_ms=ts, **kw)


def _append(log: PgPartitionLog, buf: bytes) -> tuple[int, int]:
    return log.append(buf, R.parse_header(buf), 0)


def _count_rows(conn: psycopg.Connection, log: PgPartitionLog) -> int:
    return conn.execute("SELECT count(*) FROM oncelog_batch WHERE partition_id = %s", (log.partition_id,)).fetchone()[0]


def test_schema_is_created_idempotently(store) -> None:
    schema.ensure_schema(store.conn)
    schema.ensure_schema(store.conn)
    names = {r[0] for r in store.conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'oncelog_%'")}
    assert names == {"oncelog_partition", "oncelog_batch", "oncelog_topic", "oncelog_broker", "oncelog_cluster",
                     "oncelog_broker_config", "oncelog_scram_credential", "oncelog_acl", "oncelog_acl_version",
                     "oncelog_share_state", "oncelog_share_config",  # issue 30: share groups in cluster mode
                     "oncelog_group_config", "oncelog_group_config_version",  # cluster/group_configs.py
                     "oncelog_dl_object", "oncelog_dl_batch"}  # issue 29: cluster/diskless_schema.py


def test_both_commit_paths_call_the_one_fence_also_in_a_database_made_before_it(store) -> None:
    """The exactly-once fence (leader epoch, log end, drained outbox rows) is ONE SQL function,
    ``oncelog_fence``, that the group commit's ``oncelog_append`` and the diskless
    ``oncelog_dl_commit`` both call. A database made before it holds an ``oncelog_append`` of the
    same signature with a body of its own: the next ``ensure_schema`` (a broker's start) gives it
    the fence, and appends go through it."""
    conn = store.conn
    conn.execute("DROP FUNCTION oncelog_fence(int8[], int4[], int8[], int8[], int4[], int8[])")
    conn.execute(
        "CREATE OR REPLACE FUNCTION oncelog_append(p_ids int8[], p_epochs int4[], p_bases int8[], p_lasts int8[], "
        "p_max_ts int8[], p_pids int8[], p_pepochs int2[], p_seqs int4[], p_txn bool[], p_ctl bool[], "
        "p_data bytea[], p_drain_counts int4[], p_drain_ids int8[]) "
        "RETURNS TABLE (idx int4, status int4, store_epoch int4, store_leader int4, store_end int8) "
        "LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$")
    schema.ensure_schema(conn)
    bodies = dict(conn.execute("SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'oncelog_%'").fetchall())
    assert "oncelog_fence" in bodies
    for path in ("oncelog_append", "oncelog_dl_commit"):
        assert "oncelog_fence(" in bodies[path], path
        assert "FOR UPDATE" not in bodies[path] and "oncelog.outbox" not in bodies[path], path  # only the fence
    log = store.lead("orders")
    assert _append(log, _batch(n=3)) == (0, 2)
    assert _count_rows(conn, log) == 1


def test_append_read_round_trip_is_byte_exact_with_offsets_rewritten(store) -> None:
    log = store.lead("orders")
    assert (log.log_start_offset, log.log_end_offset, log.leader_epoch) == (0, 0, 0)
    stored = []
    for i in range(20):
        buf = _batch(n=1 + i % 4, ts=1_000 + i, size=i * 7, producer_id=7, producer_epoch=0, base_sequence=0)
        base, last = _append(log, buf)
        assert last - base == i % 4
        stored.append((base, last, R.with_base_offset(buf, base, log.leader_epoch)))
    assert [b[0] for b in stored] == [0] + [b[1] + 1 for b in stored[:-1]]
    assert log.log_end_offset == stored[-1][1] + 1
    everything = b"".join(b[2] for b in stored)
    (chunk,) = log.read(0, 10**9)
    assert chunk == everything
    for _pos, h in R.iter_batches(chunk, verify_crc=True):  # CRCs still hold: only the prefix moved
        assert h.partition_leader_epoch == 0
    # A read from inside a batch starts with that batch; max_offset stops before a batch that
    # reaches it; max_bytes cuts after whole batches but always gives one (KIP-74).
    base, last, buf = stored[5]
    assert log.read(last, 10**9, max_offset=stored[7][0])[0] == stored[5][2] + stored[6][2]
    assert log.read(base, 1)[0] == buf
    assert log.read(base, 1, min_one_batch=False) == []
    assert log.read(log.log_end_offset, 100) == []
    with pytest.raises(OffsetOutOfRange):
        log.read(log.log_end_offset + 1, 100)
    assert b"".join(h_data for _h, h_data in log.iter_batches()) == everything
    assert [h.base_offset for h in log.iter_headers(stored[3][1])] == [b[0] for b in stored[3:]]
    assert log.max_timestamp_offset() == (1_019, stored[-1][0])
    assert log.offset_for_timestamp(1_010) == (stored[10][0], 1_010)
    assert log.offset_for_timestamp(10**12) is None


def test_a_fenced_leader_cannot_append_and_writes_nothing(pg_dsn) -> None:
    a, b = Store(pg_dsn, broker_id=1), Store(pg_dsn, broker_id=2)
    try:
        old = a.lead("payments", 3)
        _append(old, _batch())
        new = b.lead("payments", 3)  # broker 2 takes over with the next epoch
        assert (new.leader_epoch, new.log_end_offset) == (old.leader_epoch + 1, 3)
        rows = _count_rows(a.conn, old)
        with pytest.raises(LeaderFenced) as info:
            _append(old, _batch())
        assert info.value.code.name == "not_leader_or_follower" and info.value.retriable
        assert (info.value.epoch, info.value.store_epoch, info.value.store_leader) == (0, 1, 2)
        assert _count_rows(a.conn, old) == rows
        with pytest.raises(LeaderFenced):  # it stays fenced: resync finds the new epoch
            old.resync()
        with pytest.raises(LeaderFenced):
            old.set_log_start_offset(1)
        assert _append(new, _batch()) == (3, 5)
        assert new.read(0, 10**9)[0][-len(_batch()):][16:] == _batch()[16:]
    finally:
        a.close()
        b.close()


def test_group_commit_writes_many_partitions_in_one_transaction(pg_dsn) -> None:
    """Everything waiting when the writer looks goes into one transaction."""
    s = Store(pg_dsn, start=False)
    try:
        logs = [s.lead("wide", p) for p in range(8)]
        pending = [log.submit(b := _batch(n=2), R.parse_header(b)) for log in logs for _ in range(3)]
        s.committer.start()
        for p in pending:
            p.future.result(30)
        stats = s.committer.stats()
        assert (stats.transactions, stats.appends, stats.max_batches_per_transaction) == (1, 24, 24)
        # The database agrees: every row was inserted by the same transaction (one xmin).
        ids = [log.partition_id for log in logs]
        xmins = s.conn.execute("SELECT count(DISTINCT xmin::text), count(*) FROM oncelog_batch "
                               "WHERE partition_id = ANY(%s)", (ids,)).fetchone()
        assert xmins == (1, 24)
        for log in logs:
            assert log.log_end_offset == 6
            assert len(list(log.iter_headers(0))) == 3
    finally:
        s.close()


def test_concurrent_appenders_share_transactions(pg_dsn) -> None:
    """8 threads appending to 8 partitions at once, with a 50 ms linger: far fewer
    transactions than appends, and every acknowledged batch is there."""
    s = Store(pg_dsn, linger_s=0.05)
    try:
        logs = [s.lead("threads", p) for p in range(8)]
        barrier = threading.Barrier(8, timeout=30)

        def work(log: PgPartitionLog) -> list[tuple[int, int]]:
            out = []
            for i in range(5):
                barrier.wait()
                out.append(_append(log, _batch(n=1, ts=i)))
            return out

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(work, logs, timeout=60))
        stats = s.committer.stats()
        assert stats.appends == 40
        assert stats.transactions <= 20, stats
        ids = [log.partition_id for log in logs]
        (distinct,) = s.conn.execute("SELECT count(DISTINCT xmin::text) FROM oncelog_batch WHERE partition_id = ANY(%s)",
                                     (ids,)).fetchone()
        assert distinct == stats.transactions
        for log, offs in zip(logs, results):
            assert offs == [(i, i) for i in range(5)]
            assert log.log_end_offset == 5
    finally:
        s.close()


def test_a_failed_append_stops_the_partition_until_resync(store) -> None:
    log = store.lead("t")
    _append(log, _batch())
    # Someone else moved the log end under this leader (simulates an append whose COMMIT
    # outcome was unknown and did land): the next batch's offsets are wrong, nothing is written.
    store.conn.execute("UPDATE oncelog_partition SET log_end_offset = log_end_offset + 1 WHERE id = %s",
                       (log.partition_id,))
    with pytest.raises(LogEndMoved):
        _append(log, _batch())
    with pytest.raises(LogEndMoved):  # refused at once until resync
        _append(log, _batch())
    assert log.resync() == 3
    assert log.log_end_offset == 4
    assert _append(log, _batch()) == (4, 6)


def test_retention_moves_the_log_start_and_deletes_rows(store) -> None:
    log = store.lead("ret", config=LogConfig(retention_ms=1_000, retention_bytes=-1))
    bufs = [_batch(n=2, ts=ts) for ts in (100, 200, 300, 5_000, 6_000)]
    for b in bufs:
        _append(log, b)
    # DeleteRecords inside a batch: the batch stays, reads below the start are refused
    log.set_log_start_offset(3)
    assert log.log_start_offset == 3 and _count_rows(store.conn, log) == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert log.read(3, 10**9)[0].startswith(R.with_base_offset(bufs[1], 2)[:61])
    # retention.ms: batches whose max timestamp is older than now - 1000 go, oldest first
    assert log.enforce_retention(now_ms=4_500) == 2
    assert log.log_start_offset == 6 and _count_rows(store.conn, log) == 2
    assert log.enforce_retention(now_ms=4_500) == 0
    # never the newest batch, even when everything is old
    assert log.enforce_retention(now_ms=10**9) == 1
    assert (log.log_start_offset, log.log_end_offset, _count_rows(store.conn, log)) == (8, 10, 1)
    # the log start is in the store: the next leader starts from it
    assert store.lead("ret").log_start_offset == 8


def test_retention_bytes_keeps_at_least_the_limit(store) -> None:
    b = _batch(n=1, size=100)
    log = store.lead("bytes", config=LogConfig(retention_ms=-1, retention_bytes=3 * len(b)))
    for _ in range(6):
        _append(log, b)
    assert log.enforce_retention(now_ms=0) == 3
    assert (log.log_start_offset, _count_rows(store.conn, log)) == (3, 3)


def test_immediate_restart_of_postgres_loses_nothing_acknowledged(pg_server, store) -> None:
    logs = [store.lead("durable", p) for p in range(3)]
    acked = {p: [] for p in range(3)}
    for i in range(30):
        p = i % 3
        buf = _batch(n=1 + i % 3, ts=i)
        base, _ = _append(logs[p], buf)
        acked[p].append(R.with_base_offset(buf, base))
    pg_server.restart("immediate")  # a crash of PostgreSQL: no checkpoint, WAL replay
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        for p in range(3):
            lead = leadership.current(conn, logs[p].partition_id)
            assert lead.log_end_offset == logs[p].log_end_offset
            rows = conn.execute("SELECT data FROM oncelog_batch WHERE partition_id = %s ORDER BY base_offset",
                                (logs[p].partition_id,)).fetchall()
            assert [bytes(r[0]) for r in rows] == acked[p]
    # The broker's connections broke. Reads reconnect by themselves; the committer's next round
    # fails retriably (the store, asked on a new connection, says nothing was written) and the
    # partition resumes after resync.
    assert logs[1].read(0, 10**9)[0] == b"".join(acked[1])
    buf = _batch()
    for _attempt in range(3):
        try:
            _append(logs[0], buf)
            break
        except StoreUnavailable as exc:
            assert not exc.outcome_unknown
            logs[0].resync()
    else:
        pytest.fail("the committer did not reconnect after 3 attempts")
    assert logs[0].read(0, 10**9)[0].startswith(b"".join(acked[0]))


def test_an_append_that_times_out_is_unknown_until_resync_reads_the_store(pg_dsn) -> None:
    s = Store(pg_dsn, start=False)  # the writer is not running: no COMMIT comes
    try:
        lead = leadership.claim(s.conn, "slow", 0, 1)
        log = PgPartitionLog(s.reader, s.committer, lead, LogConfig(), append_timeout_s=0.2)
        with pytest.raises(StoreUnavailable) as info:
            _append(log, _batch())
        assert info.value.outcome_unknown
        with pytest.raises(StoreUnavailable):
            log.resync()  # still in flight
        s.committer.start()  # the batch commits after all
        for _ in range(100):  # bounded: at most 10 s
            try:
                assert log.resync() == 3  # the late COMMIT was seen by the engine
                break
            except StoreUnavailable:
                threading.Event().wait(0.1)
        else:
            pytest.fail("the timed-out append never completed")
        assert log.log_end_offset == 3  # it landed: the leader learns it from the store
        assert _append(log, _batch()) == (3, 5)
    finally:
        s.close()


class _LosesAnswer:
    """A real connection whose next statement reaches PostgreSQL (``runs``) or not, and whose
    answer is then lost with the connection, as when a network or server fails mid-COMMIT."""

    def __init__(self, conn: psycopg.Connection, runs: bool) -> None:
        self.conn, self.runs, self.broken = conn, runs, False

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def execute(self, query, params=None):
        if self.runs:
            self.conn.execute(query, params).fetchall()
        self.conn.close()
        self.broken = True
        raise psycopg.OperationalError("server closed the connection unexpectedly (test)")

    def close(self) -> None:
        self.conn.close()


@pytest.mark.parametrize("committed", [True, False])
def test_a_lost_answer_is_resolved_by_asking_the_store(pg_dsn, committed) -> None:
    s = Store(pg_dsn, start=False)
    connects = []

    def connect():
        conn = s.connect()
        connects.append(conn)
        return _LosesAnswer(conn, committed) if len(connects) == 1 else conn

    s.committer = type(s.committer)(connect, resolve_s=10)
    s.committer.start()
    try:
        log = s.lead("lost")
        buf = _batch()
        if committed:
            assert _append(log, buf) == (0, 2)  # answered from the store, not from the lost reply
            assert log.log_end_offset == 3
        else:
            with pytest.raises(StoreUnavailable) as info:
                _append(log, buf)
            assert not info.value.outcome_unknown  # the store said: nothing written
            assert log.resync() == 0
        assert _count_rows(s.conn, log) == (1 if committed else 0)
        assert s.committer.stats().failed_rounds == 1 and len(connects) == 2
    finally:
        s.close()


def test_while_postgres_is_down_nothing_is_acknowledged_and_the_broker_resumes(pg_server, pg_dsn) -> None:
    s = Store(pg_dsn, start=False)
    s.committer = type(s.committer)(s.connect, resolve_s=0.5).start()
    try:
        log = s.lead("outage")
        first = _batch()
        _append(log, first)
        pg_server.stop("fast")
        try:
            with pytest.raises(StoreUnavailable) as read_err:
                log.read(0, 10**9)
            assert read_err.value.retriable
            with pytest.raises(StoreUnavailable) as append_err:
                _append(log, _batch(n=1))
            assert append_err.value.retriable  # not acknowledged; outcome unknown: store unreachable
            with pytest.raises(StoreUnavailable):
                _append(log, _batch(n=1))  # refused at once until resync
        finally:
            pg_server.start()
        assert log.resync() == 3  # the store says: nothing written during the outage
        assert log.read(0, 10**9)[0] == R.with_base_offset(first, 0)
        assert _append(log, _batch(n=1)) == (3, 3)
    finally:
        s.close()


def test_a_walk_of_the_batches_reads_what_is_committed_while_it_walks(store) -> None:
    """A coordinator loading a partition walks its batches while a transaction marker may be
    appended (cluster mode, issue 15): the walk must reach it, as the local engine's does; the
    long cluster run found copies made twice when a marker on __consumer_offsets was missed."""
    log = store.lead("offsets")
    for _ in range(3):
        _append(log, _batch(n=1))
    seen = []
    for h, _data in log.iter_batches():
        seen.append(h.base_offset)
        if len(seen) == 3:
            _append(log, _batch(n=1))  # committed during the walk
    assert seen == [0, 1, 2, 3]

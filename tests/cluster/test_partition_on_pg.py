"""The partition leader code (broker/partitions/partition.py) is shared by both engines (issue 15): on
the PostgreSQL engine it answers duplicates (R6), keeps the LSO and the aborted index (R15),
serves fetches as in-memory chunks, and a new leader on another broker rebuilds all of that
from the store alone (R7), while the old leader is fenced."""

from __future__ import annotations

import pytest

from appends import run
from cluster_store import CONFIG, Store
from oncelog.broker.partitions.partition import Partition
from oncelog.cluster.errors import LeaderFenced
from oncelog.protocol import records as R
from oncelog.protocol.framing import FileRecords
from oncelog.types import TopicPartition

TP = TopicPartition("orders", 0)
PID = 4001


def _producer_batch(seq: int, n: int = 2, *, txn: bool = False) -> bytes:
    return R.build_batch([(b"k", b"v%d" % (seq + i), ()) for i in range(n)], timestamp_ms=1_000,
                         producer_id=PID, producer_epoch=0, base_sequence=seq, transactional=txn)


def test_partition_on_postgres_and_failover_to_another_broker(pg_dsn, tmp_path) -> None:
    a, b = Store(pg_dsn, broker_id=1), Store(pg_dsn, broker_id=2)
    try:
        (tmp_path / "a").mkdir()
        part = Partition.recover(TP, a.lead("orders"), tmp_path / "a", CONFIG)
        first = _producer_batch(0)
        r = run(lambda: part.append_validated(first, R.parse_header(first), 1_000))
        assert (r.base_offset, r.last_offset, r.duplicate) == (0, 1, False)
        again = run(lambda: part.append_validated(first, R.parse_header(first), 1_001))
        assert (again.base_offset, again.last_offset, again.duplicate) == (0, 1, True)
        # an aborted transaction, then an open one that holds the LSO
        t1 = _producer_batch(2, txn=True)
        run(lambda: part.append_validated(t1, R.parse_header(t1), 1_002))  # offsets 2-3
        assert run(lambda: part.append_marker(PID, 0, False, 0, 1_003)) == 4
        t2 = _producer_batch(4, txn=True)
        run(lambda: part.append_validated(t2, R.parse_header(t2), 1_004))  # offsets 5-6, open
        assert (part.high_watermark, part.last_stable_offset) == (7, 5)
        res = part.read(0, 10**9, read_committed=True)
        assert [(x.producer_id, x.first_offset) for x in res.aborted] == [(PID, 2)]
        (chunk,) = res.slices
        assert isinstance(chunk, bytes) and len(FileRecords(res.slices)) == len(chunk)
        assert [h.base_offset for _p, h in R.iter_batches(chunk)] == [0, 2, 4]  # stops at the LSO

        # Broker 2 takes over with an empty local directory: everything comes from the store.
        (tmp_path / "b").mkdir()
        moved = Partition.recover(TP, b.lead("orders"), tmp_path / "b", CONFIG)
        assert (moved.high_watermark, moved.last_stable_offset) == (7, 5)
        dup = run(lambda: moved.append_validated(t2, R.parse_header(t2), 2_000))
        assert (dup.base_offset, dup.duplicate) == (5, True)
        res = moved.read(0, 10**9, read_committed=True)
        assert [(x.producer_id, x.first_offset) for x in res.aborted] == [(PID, 2)]
        assert run(lambda: moved.append_marker(PID, 0, True, 1, 2_001)) == 7
        assert moved.last_stable_offset == moved.high_watermark == 8

        # The old leader is fenced at the store: it can neither append nor write a marker.
        nxt = _producer_batch(6)
        with pytest.raises(LeaderFenced):
            run(lambda: part.append_validated(nxt, R.parse_header(nxt), 2_002))
        assert moved.high_watermark == 8
    finally:
        a.close()
        b.close()

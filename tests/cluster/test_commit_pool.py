"""Several group-commit rounds in flight per broker (issue 28, storage/engines/postgres/commit_pool.py), on a
real PostgreSQL: each partition is always written by the same committer, so its batches commit
in the order they were given offsets; the committers' rounds are separate transactions."""

from __future__ import annotations

import pytest

from cluster_store import Store
from oncelog.storage.engines.postgres.commit_pool import CommitterPool
from oncelog.protocol import records as R


def _batch(n: int = 2) -> bytes:
    return R.build_batch([(b"k", b"v" * 20, ())] * n, timestamp_ms=1_000)


def test_three_committers_keep_each_partitions_order(pg_dsn) -> None:
    """Six partitions, four batches each, queued before three committers start: every batch is
    accepted at the offsets it was given, each committer wrote its partitions in one round
    (three transactions, one per committer), and a partition's rows are all one round's."""
    s = Store(pg_dsn, start=False)
    s.committer.close()
    pool = CommitterPool(s.connect, 3)
    s.committer = pool  # type: ignore[assignment]
    try:
        logs = [s.lead("pooled", p) for p in range(6)]
        pending = [log.submit(b := _batch(), R.parse_header(b)) for _ in range(4) for log in logs]
        pool.start()
        for p in pending:
            p.future.result(30)
        stats = pool.stats()
        assert (stats.appends, stats.refused, stats.failed_rounds) == (24, 0, 0)
        assert stats.transactions == len({log.partition_id % 3 for log in logs}) == 3
        for log in logs:
            assert log.log_end_offset == 8
            assert [h.base_offset for h in log.iter_headers(0)] == [0, 2, 4, 6]
            (rounds,) = s.conn.execute("SELECT count(DISTINCT xmin::text) FROM oncelog_batch WHERE partition_id = %s",
                                       (log.partition_id,)).fetchone()
            assert rounds == 1
    finally:
        s.close()


def test_a_pool_needs_a_committer() -> None:
    with pytest.raises(ValueError):
        CommitterPool(lambda: None, 0)

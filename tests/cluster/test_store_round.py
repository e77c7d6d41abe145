"""How a store round completes its appends (storage/engines/postgres/group_commit.py,
storage/store_pending.py), on a real PostgreSQL, with the appends awaited on an event loop as the
broker awaits them: each append's future completes after the COMMIT that holds it; a round's
waiters are settled with ONE hop to the loop, in submission order; a failed round fails exactly
its own appends (another committer's round at the same moment commits); a lost answer is
resolved by asking the store, for every append of the round. Every wait is bounded."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from cluster_store import Store, loses_first_answer
from oncelog.cluster.errors import StoreUnavailable
from oncelog.protocol import records as R
from oncelog.storage.engines.postgres.commit_pool import CommitterPool
from oncelog.storage.engines.postgres.group_commit import GroupCommitter
from oncelog.storage.store_pending import PendingAppend

WAIT_S = 30


def _batch(ts: int = 1_000) -> bytes:
    return R.build_batch([(b"k", b"v" * 20, ())] * 2, timestamp_ms=ts)


def _submit(log, ts: int = 1_000) -> PendingAppend:
    b = _batch(ts)
    return log.submit(b, R.parse_header(b))


async def _outcomes(pendings: list[PendingAppend], start) -> tuple[list, list[int]]:
    """Await every append in a task of its own (as Produce requests do), started before the
    committer is (``start()``), so that each round holds what was queued; returns each
    append's outcome (None or its exception) and the order the awaits returned in."""
    order: list[int] = []

    async def one(i: int, p: PendingAppend) -> None:
        try:
            await p
        finally:
            order.append(i)

    tasks = [asyncio.ensure_future(one(i, p)) for i, p in enumerate(pendings)]
    await asyncio.sleep(0)  # every task is at its await before the first COMMIT
    start()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)
    return results, order


def test_a_rounds_waiters_are_settled_in_order_with_one_hop_to_the_loop(pg_dsn) -> None:
    """24 appends over 6 partitions queued before the committer starts: one round commits them
    all, and the loop is woken ONCE for the round (one ``call_soon_threadsafe``, not one per
    append: 24 on the code before), its awaits returning in submission order."""
    s = Store(pg_dsn, start=False)
    try:
        logs = [s.lead("hop", p) for p in range(6)]

        async def main() -> tuple[list, list[int], int]:
            loop = asyncio.get_running_loop()
            hops = 0
            real = loop.call_soon_threadsafe

            def counted(*args, **kw):
                nonlocal hops
                hops += 1
                return real(*args, **kw)

            loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
            pendings = [_submit(log) for _ in range(4) for log in logs]
            results, order = await _outcomes(pendings, s.committer.start)
            return results, order, hops

        results, order, hops = asyncio.run(main())
        assert results == [None] * 24
        assert s.committer.stats().transactions == 1
        assert hops == 1, f"{hops} hops to the loop for one round of 24 appends"
        assert order == list(range(24))
        for log in logs:
            assert log.log_end_offset == 8
    finally:
        s.close()


def test_an_append_completes_only_after_the_commit_that_holds_it(pg_dsn) -> None:
    """When an append's future completes, its batch is visible to another connection: the
    answer came after COMMIT (checked on the committer's thread, at completion)."""
    s = Store(pg_dsn, start=False)
    seen: list[tuple[int, int]] = []
    try:
        logs = [s.lead("after-commit", p) for p in range(3)]
        with psycopg.connect(pg_dsn, autocommit=True) as other:

            def visible(log, base: int):
                def check(_fut) -> None:  # runs before the waiter is settled (registered first)
                    (n,) = other.execute("SELECT count(*) FROM oncelog_batch WHERE partition_id = %s "
                                         "AND base_offset = %s", (log.partition_id, base)).fetchone()
                    seen.append((base, n))
                return check

            async def main() -> list:
                pendings = []
                for _ in range(2):
                    for log in logs:
                        p = _submit(log)
                        p.future.add_done_callback(visible(log, p.base_offset))
                        pendings.append(p)
                results, _ = await _outcomes(pendings, s.committer.start)
                return results

            assert asyncio.run(main()) == [None] * 6
        assert len(seen) == 6 and all(n == 1 for _, n in seen), seen
    finally:
        s.close()


_REFUSE = """
CREATE FUNCTION test_refuse_666() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.max_timestamp = 666 THEN RAISE EXCEPTION 'test: this batch fails its round'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_refuse_666 BEFORE INSERT ON oncelog_batch FOR EACH ROW EXECUTE FUNCTION test_refuse_666();
"""


def test_a_failed_round_fails_exactly_its_own_appends(pg_dsn) -> None:
    """Two committers, each with one round queued; one batch of committer A's round makes its
    statement fail (a trigger raises: a real database error). Every append of A's round fails
    (StoreUnavailable, known outcome: nothing written), none of committer B's round, which
    commits at the same time; after ``resync`` A's partitions append again."""
    s = Store(pg_dsn, start=False)
    s.committer.close()
    pool = CommitterPool(s.connect, 2)
    s.committer = pool  # type: ignore[assignment]
    try:
        s.conn.execute(_REFUSE)
        logs = [s.lead("fail-one", p) for p in range(6)]
        group_a = [log for log in logs if log.partition_id % 2 == logs[0].partition_id % 2]
        group_b = [log for log in logs if log not in group_a]
        assert len(group_a) == len(group_b) == 3

        async def main() -> dict:
            pendings = {}
            for log in logs:
                pendings[(log.what, 0)] = _submit(log)
                bad = log is group_a[1]
                pendings[(log.what, 1)] = _submit(log, ts=666 if bad else 1_000)
            keys = list(pendings)
            results, _ = await _outcomes([pendings[k] for k in keys], pool.start)
            return dict(zip(keys, results))

        results = asyncio.run(main())
        for log in group_a:
            for i in (0, 1):
                err = results[(log.what, i)]
                assert isinstance(err, StoreUnavailable) and not err.outcome_unknown, (log.what, i, err)
        for log in group_b:
            assert results[(log.what, 0)] is None and results[(log.what, 1)] is None
        stats = pool.stats()
        assert (stats.failed_rounds, stats.transactions, stats.appends) == (1, 1, 6)
        rows = dict(s.conn.execute("SELECT partition_id, count(*) FROM oncelog_batch GROUP BY partition_id").fetchall())
        assert {log.partition_id: rows.get(log.partition_id, 0) for log in logs} == \
            {log.partition_id: 0 if log in group_a else 2 for log in logs}
        for log in group_a:
            assert log.resync() == 0  # nothing of the failed round was written
            b = _batch()
            assert log.append(b, R.parse_header(b), 0) == (0, 1)
    finally:
        s.close()


@pytest.mark.parametrize("committed", [True, False])
def test_a_lost_answer_is_resolved_for_every_append_of_the_round(pg_dsn, committed) -> None:
    """The connection breaks after the round's statement ran (or before it reached the server):
    the committer asks the store on a new connection, and every awaited append of the round
    gets the store's answer (committed: all accepted; not: all failed, nothing unknown)."""
    s = Store(pg_dsn, start=False)
    connect, connects = loses_first_answer(s, committed)

    s.committer = GroupCommitter(connect, resolve_s=10)
    try:
        logs = [s.lead("lost-round", p) for p in range(3)]

        async def main() -> list:
            pendings = [_submit(log) for _ in range(2) for log in logs]
            results, _ = await _outcomes(pendings, s.committer.start)
            return results

        results = asyncio.run(main())
        if committed:
            assert results == [None] * 6
            assert [log.log_end_offset for log in logs] == [4, 4, 4]
        else:
            assert all(isinstance(r, StoreUnavailable) and not r.outcome_unknown for r in results), results
        (n,) = s.conn.execute("SELECT count(*) FROM oncelog_batch").fetchone()
        assert n == (6 if committed else 0)
        assert s.committer.stats().failed_rounds == 1 and len(connects) == 2
    finally:
        s.close()

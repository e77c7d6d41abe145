"""``Partition.append_validated`` on the PostgreSQL engine (issue 15): the Produce path of cluster mode, on a real
PostgreSQL. Batches are answered after their group COMMIT without blocking the event loop; the
producer state moves only after COMMIT; five batches of one producer sent at once are appended
in order (each checked against a state that includes the previous one); a retried batch is
answered as a duplicate; a deposed leader's batch is refused NOT_LEADER_OR_FOLLOWER and changes
neither the store nor its producer state."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from appends import completed, run
from cluster_store import CONFIG, Store
from oncelog.broker.partitions.partition import Partition
from oncelog.protocol import records as R
from oncelog.protocol.errors import KafkaStorageError, NotLeaderOrFollower
from oncelog.types import TopicPartition

TP = TopicPartition("orders", 0)
PID = 5001


def _batch(seq: int, n: int = 3, pid: int = PID) -> bytes:
    return R.build_batch([(None, b"v%d" % (seq + i), ()) for i in range(n)], timestamp_ms=1_000,
                         producer_id=pid, producer_epoch=0, base_sequence=seq)


def test_five_in_flight_batches_of_one_producer_and_a_retry(pg_dsn, tmp_path) -> None:
    store = Store(pg_dsn)
    try:
        part = Partition.recover(TP, store.lead("orders"), tmp_path, CONFIG)

        async def go() -> list:
            ticks = 0

            async def ticker() -> None:  # the loop keeps running while appends wait for COMMIT
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            t = asyncio.get_running_loop().create_task(ticker())
            batches = [_batch(3 * i) for i in range(5)] + [_batch(0, pid=PID + 1)]
            results = await asyncio.gather(*(part.append_validated(b, R.parse_header(b), 1_000)
                                              for b in batches))
            retry = await part.append_validated(batches[2], R.parse_header(batches[2]), 1_001)
            t.cancel()
            assert ticks > 1
            return [*results, retry]

        results = asyncio.run(go())
        *appended, retry = results
        assert not any(r.duplicate for r in appended)
        mine = [r.base_offset for r in appended[:5]]
        assert mine == sorted(mine), "one producer's batches are appended in the order sent"
        assert sorted((r.base_offset, r.last_offset) for r in appended) == [(3 * i, 3 * i + 2) for i in range(6)]
        assert (retry.base_offset, retry.last_offset, retry.duplicate) == (appended[2].base_offset,
                                                                          appended[2].last_offset, True)
        assert part.high_watermark == 18
        assert part.producers.entries[PID].last_seq == 14
    finally:
        store.close()


def test_a_deposed_leader_is_refused_and_its_state_does_not_move(pg_dsn, tmp_path) -> None:
    a, b = Store(pg_dsn, broker_id=1), Store(pg_dsn, broker_id=2)
    try:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        old = Partition.recover(TP, a.lead("orders"), tmp_path / "a", CONFIG)
        first = _batch(0)
        assert run(lambda: old.append_validated(first, R.parse_header(first), 1_000)).base_offset == 0
        new = Partition.recover(TP, b.lead("orders"), tmp_path / "b", CONFIG)  # epoch bumped
        late = _batch(3)
        with pytest.raises(NotLeaderOrFollower):
            run(lambda: old.append_validated(late, R.parse_header(late), 1_001))
        assert old.producers.entries[PID].last_seq == 2  # unchanged: nothing was committed
        assert old.log.failed is not None  # the tracker closes it at the next view
        r = run(lambda: new.append_validated(late, R.parse_header(late), 1_002))
        assert (r.base_offset, r.duplicate) == (3, False)
        assert new.high_watermark == 6
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("engine", ["files", "postgresql"])
def test_log_append_time_stamps_batches_on_both_engines(engine, pg_dsn, tmp_path) -> None:
    """message.timestamp.type=LogAppendTime (issue 16): the batch in the log carries the append
    time as its max timestamp and the LogAppendTime attribute, with a valid CRC, on both engines."""
    import dataclasses

    cfg = dataclasses.replace(CONFIG, log_append_time=True)
    store = Store(pg_dsn) if engine == "postgresql" else None
    try:
        if store is not None:
            part = Partition.recover(TP, store.lead("orders"), tmp_path, cfg)
            res = run(lambda: part.append_validated(_batch(0), R.parse_header(_batch(0)), 7_777))
        else:
            part = Partition.open(TP, tmp_path / "orders-0", cfg, 0)
            res = completed(part.append_validated(_batch(0), R.parse_header(_batch(0)), 7_777))
        assert res.log_append_time == 7_777
        read = part.log.read_batches(0, 1 << 20)
        (_pos, h), = list(R.iter_batches(read, verify_crc=True))
        assert h.max_timestamp == 7_777 and h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME
        assert [r.timestamp for r in R.iter_records(read)] == [7_777] * 3
    finally:
        if store is not None:
            store.close()


def _hold_after_commit(part: Partition) -> dict:
    """Make ``part``'s engine hand back a future that completes only when the test says, so the
    test can look at the partition between the store's COMMIT and the event loop taking it in."""
    from concurrent.futures import Future

    from oncelog.storage.store_pending import PendingAppend

    real_submit = part.log.submit
    gate: dict = {}

    def submit(batch, header, now_ms=None, *, drained=()):  # type: ignore[no-untyped-def]
        pending = real_submit(batch, header, now_ms, drained=drained)
        gate["committed"], gate["release"] = pending.future, Future()
        return PendingAppend(pending.base_offset, pending.last_offset, gate["release"])

    part.log.submit = submit  # type: ignore[method-assign]
    return gate


def _txn_batch() -> bytes:
    """Three records of producer PID's transaction, sequence 0."""
    return R.build_batch([(None, b"t%d" % i, ()) for i in range(3)], timestamp_ms=1_000, producer_id=PID,
                         producer_epoch=0, base_sequence=0, transactional=True)


async def _held_append(part: Partition, batch: bytes) -> tuple[dict, "asyncio.Future"]:
    """Start appending ``batch`` with the engine's answer held back (``_hold_after_commit``);
    returns once the append has been handed to the store (bounded: 1 s)."""
    gate = _hold_after_commit(part)
    task = part.append_validated(batch, R.parse_header(batch), 1_000)
    for _ in range(1000):
        if "committed" in gate:
            return gate, task
        await asyncio.sleep(0.001)
    raise AssertionError("the append never reached the engine")


def test_a_committed_transactional_batch_is_not_stable_before_its_transaction_is_known(pg_dsn, tmp_path) -> None:
    """R15 in cluster mode (the cause of long run 7's anomalies): the store's COMMIT moves the
    engine's log end on the committer's thread; until the event loop has registered the batch's
    open transaction, a read_committed fetch must not take the batch as stable. Before the fix the
    LSO jumped to the new log end in that window, so a reader kept records of a transaction that
    was aborted afterwards."""
    store = Store(pg_dsn)
    try:
        part = Partition.recover(TP, store.lead("orders"), tmp_path, CONFIG)
        txn = _txn_batch()

        async def go() -> None:
            gate, task = await _held_append(part, txn)
            await asyncio.wrap_future(gate["committed"])
            assert part.log.log_end_offset == 3, "the batch is in the store"
            assert (part.high_watermark, part.last_stable_offset) == (0, 0)
            assert part.read(0, 1 << 20, read_committed=True).slices == []
            gate["release"].set_result(None)
            await task
            assert (part.high_watermark, part.last_stable_offset) == (3, 0), "open transaction holds the LSO"

        asyncio.run(go())
    finally:
        store.close()


def test_a_cancelled_caller_does_not_leave_the_producer_state_behind_the_store(pg_dsn, tmp_path) -> None:
    """The Produce handler may be cancelled (connection closed, broker stopping) while its batch
    waits for COMMIT; the batch may still commit, and the producer state must take it in, or a
    retry would be written twice and an open transaction would not hold the LSO."""
    store = Store(pg_dsn)
    try:
        part = Partition.recover(TP, store.lead("orders"), tmp_path, CONFIG)
        txn = _txn_batch()

        async def go() -> None:
            gate, task = await _held_append(part, txn)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wrap_future(gate["committed"])
            gate["release"].set_result(None)
            for _ in range(1000):
                if part.producers.entries.get(PID) is not None:
                    break
                await asyncio.sleep(0.001)
            assert part.producers.entries[PID].last_seq == 2
            assert (part.high_watermark, part.last_stable_offset) == (3, 0)
            retry = await part.append_validated(txn, R.parse_header(txn), 1_001)
            assert retry.duplicate and retry.base_offset == 0

        asyncio.run(go())
    finally:
        store.close()


def test_a_waiter_cancelled_before_its_append_started_gives_the_producers_turn_back(pg_dsn, tmp_path) -> None:
    """``append_validated`` (issue 28) takes the batch's place in its producer's line at the
    call. A waiter cancelled at once (a Produce handler cancelled in the same turn of the event
    loop: a connection torn down, the broker stopping) must neither lose the batch nor keep that
    place: the append runs on and the producer's next batch goes in after it. Before the fix the
    task that was to run the append was cancelled before its first step, the append never ran,
    its place was never given back, and every later append of that producer id on the partition
    (its batches, its transaction markers) waited for ever."""
    store = Store(pg_dsn)
    try:
        part = Partition.recover(TP, store.lead("orders"), tmp_path, CONFIG)

        async def go() -> None:
            first, second = _batch(0), _batch(3)
            fut = part.append_validated(first, R.parse_header(first), 1_000)
            fut.cancel()  # before the loop ran anything
            nxt = await asyncio.wait_for(part.append_validated(second, R.parse_header(second), 1_001), 10)
            assert (nxt.base_offset, nxt.duplicate) == (3, False), "the first batch went in before it"
            assert part.producers.entries[PID].last_seq == 5

        asyncio.run(go())
    finally:
        store.close()


def test_batches_pipelined_behind_a_refused_one_are_refused_too_and_nothing_is_written(pg_dsn, tmp_path) -> None:
    """Issue 29, the pending layer on the real PostgreSQL engine: three batches of one producer
    go to the store at once (each continues the one before it), and the first is refused at its
    COMMIT (a new leader claimed the partition meanwhile). Every batch pipelined behind it is
    refused too, retriably, none of them is in the store, and the old leader's producer state has
    not moved; the new leader then takes the same batches as new ones."""
    a, b = Store(pg_dsn, broker_id=1), Store(pg_dsn, broker_id=2)
    try:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        old = Partition.recover(TP, a.lead("orders"), tmp_path / "a", CONFIG)
        first = _batch(0)
        assert run(lambda: old.append_validated(first, R.parse_header(first), 1_000)).base_offset == 0
        batches = [_batch(3 * i) for i in range(1, 4)]

        async def go() -> list:
            new_leader = await asyncio.get_running_loop().run_in_executor(None, b.lead, "orders")
            appends = [old.append_validated(x, R.parse_header(x), 1_001) for x in batches]
            assert len(old._unapplied) == 3, "all three were handed to the store at once"
            return [new_leader, *await asyncio.gather(*appends, return_exceptions=True)]

        new_log, *outcomes = asyncio.run(go())
        assert all(isinstance(o, (NotLeaderOrFollower, KafkaStorageError)) for o in outcomes), outcomes
        assert old.producers.entries[PID].last_seq == 2 and old.high_watermark == 3
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT b.base_offset FROM oncelog_batch b JOIN oncelog_partition p "
                                "ON p.id = b.partition_id WHERE p.topic = 'orders'").fetchall()
        assert rows == [(0,)], "nothing of the refused run is in the store"
        new = Partition.recover(TP, new_log, tmp_path / "b", CONFIG)
        got = [run(lambda x=x: new.append_validated(x, R.parse_header(x), 1_002)) for x in batches]
        assert [(r.base_offset, r.duplicate) for r in got] == [(3, False), (6, False), (9, False)]
    finally:
        a.close()
        b.close()

"""``Partition.append_validated_async`` (issue 15): the Produce path of cluster mode, on a real
PostgreSQL. Batches are answered after their group COMMIT without blocking the event loop; the
producer state moves only after COMMIT; five batches of one producer sent at once are appended
in order (each checked against a state that includes the previous one); a retried batch is
answered as a duplicate; a deposed leader's batch is refused NOT_LEADER_OR_FOLLOWER and changes
neither the store nor its producer state."""

from __future__ import annotations

import asyncio

import pytest

from cluster_store import CONFIG, Store
from oncelog.broker.partition import Partition
from oncelog.protocol import records as R
from oncelog.protocol.errors import NotLeaderOrFollower
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
        assert part.commits_asynchronously

        async def go() -> list:
            ticks = 0

            async def ticker() -> None:  # the loop keeps running while appends wait for COMMIT
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            t = asyncio.get_running_loop().create_task(ticker())
            batches = [_batch(3 * i) for i in range(5)] + [_batch(0, pid=PID + 1)]
            results = await asyncio.gather(*(part.append_validated_async(b, R.parse_header(b), 1_000)
                                              for b in batches))
            retry = await part.append_validated_async(batches[2], R.parse_header(batches[2]), 1_001)
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
        assert asyncio.run(old.append_validated_async(first, R.parse_header(first), 1_000)).base_offset == 0
        new = Partition.recover(TP, b.lead("orders"), tmp_path / "b", CONFIG)  # epoch bumped
        late = _batch(3)
        with pytest.raises(NotLeaderOrFollower):
            asyncio.run(old.append_validated_async(late, R.parse_header(late), 1_001))
        assert old.producers.entries[PID].last_seq == 2  # unchanged: nothing was committed
        assert old.log.failed is not None  # the tracker closes it at the next view
        r = asyncio.run(new.append_validated_async(late, R.parse_header(late), 1_002))
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
            res = asyncio.run(part.append_validated_async(_batch(0), R.parse_header(_batch(0)), 7_777))
        else:
            part = Partition.open(TP, tmp_path / "orders-0", cfg, 0)
            res = part.append_validated(_batch(0), R.parse_header(_batch(0)), 7_777)
        assert res.log_append_time == 7_777
        read = part.log.read_batches(0, 1 << 20)
        (_pos, h), = list(R.iter_batches(read, verify_crc=True))
        assert h.max_timestamp == 7_777 and h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME
        assert [r.timestamp for r in R.iter_records(read)] == [7_777] * 3
    finally:
        if store is not None:
            store.close()

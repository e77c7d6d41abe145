"""The pending layer of producer state (issue 29, broker/partitions/pending_producers.py): on an
engine that completes appends later, a producer's data batch that continues its run of batches
in flight goes to the engine at once (at most 5), checked against the producer state as it will
be once they commit; everything else waits in the producer's line as before.

The engine here (``StoreEngine``) behaves as both real ones that complete later do (PostgreSQL's
``oncelog_append``, the diskless ``oncelog_dl_commit``): it assigns offsets at ``submit``,
commits a partition's batches in offset order, each conditional on the log end, so a failed batch
fails every later one of the partition (nothing of them in the log), and refuses appends until
the leader is rebuilt (here: a new ``Partition`` recovered from it). The real engines are checked
for the same in tests/cluster/test_partition_async_append.py and tests/diskless/.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Generator, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.broker.partitions.partition import AppendResult, Partition
from oncelog.protocol import records
from oncelog.protocol.errors import (KafkaError, KafkaStorageError, OutOfOrderSequenceNumber)
from oncelog.storage.config import LogConfig
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)
PID = 7100


def _batch(seq: int, n: int = 2, *, pid: int = PID, epoch: int = 0, transactional: bool = False) -> bytes:
    return records.build_batch([(None, b"v%d" % (seq + i), ()) for i in range(n)], producer_id=pid,
                               producer_epoch=epoch, base_sequence=seq, transactional=transactional,
                               timestamp_ms=1)


class _Pending:
    done = False

    def __init__(self, base: int, last: int, fut: asyncio.Future[None]) -> None:
        self.base_offset, self.last_offset, self._fut = base, last, fut

    def __await__(self) -> Generator[Any, None, None]:
        yield from self._fut.__await__()


class StoreEngine:
    """A partition engine that completes later, as a conditional store does (module docstring).
    ``log`` is what is committed: (base, last, header)."""

    def __init__(self, committed: list[tuple[int, int, records.BatchHeader]] | None = None) -> None:
        self.config = LogConfig()
        self.log: list[tuple[int, int, records.BatchHeader]] = list(committed or [])
        self.log_start_offset = 0
        self.active_base_offset = 0
        self._end = self.log[-1][1] + 1 if self.log else 0
        self._next = self._end
        self.queue: list[tuple[int, int, records.BatchHeader, asyncio.Future[None]]] = []
        self.failed: KafkaError | None = None

    @property
    def log_end_offset(self) -> int:
        return self._end

    def iter_headers(self, from_offset: int) -> Iterator[records.BatchHeader]:
        for base, _last, h in self.log:
            if base >= from_offset:
                yield h

    def submit(self, batch: Any, header: records.BatchHeader, now_ms: int, *, drained: tuple[int, ...] = ()) -> _Pending:
        if self.failed is not None:
            raise self.failed
        base = self._next
        last = base + header.last_offset_delta
        self._next = last + 1
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((base, last, header._replace(base_offset=base), fut))
        return _Pending(base, last, fut)

    def commit(self) -> None:
        """COMMIT the oldest submitted batch (conditional on the log end: it is)."""
        base, last, h, fut = self.queue.pop(0)
        assert base == self._end
        self.log.append((base, last, h))
        self._end = last + 1
        fut.set_result(None)

    def fail(self) -> None:
        """The oldest submitted batch is refused; every later one finds the log end moved."""
        self.failed = KafkaStorageError("the store refused the commit")
        for i, (base, _last, _h, fut) in enumerate(self.queue):
            fut.set_exception(self.failed if i == 0 else
                              KafkaStorageError(f"batch assigned offset {base}, but the stored log end is {self._end}"))
        self.queue.clear()
        self._next = self._end

    def close(self) -> None:
        pass

    def disk_usage(self) -> tuple[int, int]:
        return -1, -1


def _part(tmp_path: Path, engine: StoreEngine) -> Partition:
    (tmp_path / "t-0").mkdir(exist_ok=True)
    return Partition.recover(TP, engine, tmp_path / "t-0", LogConfig())  # type: ignore[arg-type]


async def _settle(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _append(part: Partition, batch: bytes) -> "asyncio.Future[AppendResult]":
    """``append_validated`` called now (its place in line is taken at the call); its outcome,
    raised at the call or later, as a future."""
    try:
        aw = part.append_validated(batch, records.parse_header(batch), 1)
    except KafkaError as exc:
        fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        fut.set_exception(exc)
        return fut
    return asyncio.ensure_future(_await(aw))


async def _await(aw: Any) -> Any:
    return await aw


def test_continuing_batches_go_to_the_engine_at_once_and_apply_in_offset_order(tmp_path: Path) -> None:
    """Fails on the code before the pending layer: the second batch waited for the first's COMMIT."""
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        outs = [_append(part, _batch(2 * i)) for i in range(6)]
        await _settle()
        assert [q[0] for q in engine.queue] == [0, 2, 4, 6, 8], "five pipelined at once; the sixth waits in line"
        assert part.high_watermark == 0 and PID not in part.producers.entries
        engine.commit()
        await _settle()
        assert part.high_watermark == 2 and part.producers.entries[PID].last_seq == 1
        assert not any(o.done() for o in outs[1:])
        for _ in range(4):
            engine.commit()
        await _settle()
        assert part.high_watermark == 10 and part.producers.entries[PID].last_seq == 9
        assert [q[0] for q in engine.queue] == [10], "the sixth, checked against the state, submitted now"
        engine.commit()
        results = [await o for o in outs]
        assert [(r.base_offset, r.last_offset, r.duplicate) for r in results] == [
            (2 * i, 2 * i + 1, False) for i in range(6)]
        assert part.producers.entries[PID].last_seq == 11 and not part._inflight_pids and not part._unapplied

    asyncio.run(go())


def test_commits_completing_out_of_order_still_apply_in_offset_order(tmp_path: Path) -> None:
    """The engine's futures may complete in any order within a commit: the producer state never
    takes a later batch before an earlier one, and the high watermark never passes an unapplied one."""
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        outs = [_append(part, _batch(2 * i)) for i in range(3)]
        await _settle()
        queue = list(engine.queue)
        engine.queue.clear()
        for base, last, h, fut in reversed(queue):  # the store commits all three; futures complete last first
            engine.log.append((base, last, h))
            engine._end = max(engine._end, last + 1)
            fut.set_result(None)
            await _settle(3)
            assert part.high_watermark <= part.producers.map_end_offset
        results = [await o for o in outs]
        assert [r.base_offset for r in results] == [0, 2, 4]
        assert part.producers.entries[PID].last_seq == 5 and part.high_watermark == 6

    asyncio.run(go())


def test_a_duplicate_of_an_in_flight_batch_is_answered_with_its_original_offsets(tmp_path: Path) -> None:
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        first, second = _append(part, _batch(0)), _append(part, _batch(2))
        retry = _append(part, _batch(0))  # a retry of the first while it is in flight: waits in line
        await _settle()
        assert [q[0] for q in engine.queue] == [0, 2]
        engine.commit()
        engine.commit()
        r = await retry
        assert (r.base_offset, r.last_offset, r.duplicate) == (0, 1, True)
        assert engine.queue == [] and [(await first).base_offset, (await second).base_offset] == [0, 2]

    asyncio.run(go())


def test_a_retry_of_a_batch_that_failed_is_checked_afresh(tmp_path: Path) -> None:
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        first = _append(part, _batch(0))
        await _settle()
        retry = _append(part, _batch(0))  # waits in line: a duplicate of an in-flight batch
        await _settle()
        engine.fail()
        with pytest.raises(KafkaStorageError):
            await first
        with pytest.raises(KafkaStorageError):
            await retry  # checked afresh (not a duplicate: nothing is in the log), the engine refuses it
        assert engine.log == [] and PID not in part.producers.entries
        fresh = _recovered(engine)
        rebuilt = _part(tmp_path, fresh)  # the leader tracker rebuilds the partition
        pending = _append(rebuilt, _batch(0))
        await _settle()
        fresh.commit()
        again = await pending
        assert (again.base_offset, again.duplicate) == (0, False)

    asyncio.run(go())


def _recovered(engine: StoreEngine) -> StoreEngine:
    return StoreEngine(engine.log)


def test_a_gap_against_an_in_flight_batch_is_refused_once_it_completed(tmp_path: Path) -> None:
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        first = _append(part, _batch(0))
        gap = _append(part, _batch(5))
        await _settle()
        assert [q[0] for q in engine.queue] == [0], "a gap is not pipelined"
        engine.commit()
        with pytest.raises(OutOfOrderSequenceNumber):
            await gap
        assert (await first).base_offset == 0 and engine.queue == []
        assert part.producers.entries[PID].last_seq == 1

    asyncio.run(go())


def test_a_failed_batch_fails_every_batch_pipelined_behind_it_and_leaves_the_state(tmp_path: Path) -> None:
    """Fails on the code before the pending layer: there the batches behind the failed one waited
    in line and were then refused OUT_OF_ORDER_SEQUENCE_NUMBER (not retriable for librdkafka)
    against a state that lacked the failed batch; now they were submitted and fail with it,
    retriably, and none of them is in the log."""
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        engine_done = _append(part, _batch(0))
        await _settle()
        engine.commit()
        assert (await engine_done).base_offset == 0
        outs = [_append(part, _batch(2 + 2 * i)) for i in range(3)]
        await _settle()
        assert [q[0] for q in engine.queue] == [2, 4, 6]
        engine.fail()
        for o in outs:
            with pytest.raises(KafkaStorageError):
                await o
        assert [b for b, _l, _h in engine.log] == [0], "nothing of the failed run is in the log"
        assert part.producers.entries[PID].last_seq == 1 and part.high_watermark == 2
        assert not part._inflight_pids and not part._unapplied
        with pytest.raises(KafkaStorageError):
            await _append(part, _batch(2))  # the engine refuses until the leader is rebuilt

    asyncio.run(go())


def test_markers_epoch_changes_and_batches_after_a_marker_wait_in_line(tmp_path: Path) -> None:
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        data = _append(part, _batch(0, transactional=True))
        plain = _append(part, _batch(2))  # another transactional flag: waits in line
        await _settle()
        assert [q[0] for q in engine.queue] == [0]
        engine.commit()
        await _settle()
        assert [q[0] for q in engine.queue] == [2]
        engine.commit()
        await data, await plain
        txn = _append(part, _batch(4, transactional=True))
        marker = asyncio.ensure_future(_await(part.append_marker(PID, 0, True, 0, 2)))
        after = _append(part, _batch(6, transactional=True))  # behind a marker: a new transaction
        bumped = _append(part, _batch(0, epoch=1))  # an epoch change waits too
        await _settle()
        assert [q[0] for q in engine.queue] == [4]
        engine.commit()
        await _settle()
        assert len(engine.queue) == 1 and engine.queue[0][2].is_control, "the marker, after the batch"
        engine.commit()
        await _settle()
        assert [q[0] for q in engine.queue] == [7]
        engine.commit()
        await _settle()
        assert [q[0] for q in engine.queue] == [9]
        engine.commit()
        assert (await txn).base_offset == 4 and await marker == 6
        assert (await after).base_offset == 7 and (await bumped).base_offset == 9
        assert part.producers.entries[PID].epoch == 1

    asyncio.run(go())


# -- a model: random submits, commits and failures of two producers ----------------------------

_OPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.sampled_from([PID, PID + 1]), st.sampled_from(["next", "next", "next", "retry", "gap"]),
              st.integers(1, 5)),
    st.just(("commit",)), st.just(("commit",)), st.just(("fail",)), st.just(("rebuild",))), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_random_submits_commits_and_failures_keep_the_log_and_the_state_right(tmp_path: Path, ops: list) -> None:
    """Against the store: every batch answered appended is in the log once, at its offsets; every
    duplicate answer points at the batch in the log; nothing answered with an error is there;
    each producer's sequences in the log are contiguous; the high watermark never passes what the
    producer state took in; the producer state equals a replay of the log."""
    for p in (tmp_path / "t-0").glob("*"):
        p.unlink()
    engine = StoreEngine()
    part = _part(tmp_path, engine)

    async def go() -> None:
        nonlocal engine, part
        sent: dict[int, list[int]] = {PID: [], PID + 1: []}  # base sequences sent
        nxt = {PID: 0, PID + 1: 0}
        outs: list[tuple[int, int, asyncio.Future[AppendResult]]] = []
        for op in ops:
            if op[0] == "send":
                pid, kind, back = op[1], op[2], op[3]
                if kind == "retry" and sent[pid]:
                    seq = sent[pid][-min(back, len(sent[pid]))]  # one of the last five sent
                elif kind == "gap":
                    seq = nxt[pid] + 4
                else:
                    seq = nxt[pid]
                    nxt[pid] += 2
                    sent[pid].append(seq)
                outs.append((pid, seq, _append(part, _batch(seq, pid=pid))))
            elif op[0] == "commit" and engine.queue:
                engine.commit()
            elif op[0] == "fail" and engine.queue:
                engine.fail()
            elif op[0] == "rebuild" and engine.failed is not None and not part._inflight_pids:
                engine = _recovered(engine)
                part = _part(tmp_path, engine)
            await _settle(8)
            assert part.high_watermark <= max(part.producers.map_end_offset, part.log_start_offset)
        for _ in range(200):
            if not engine.queue and not part._inflight_pids:
                break
            if engine.queue:
                engine.commit()
            await _settle(8)
        await _settle(8)  # the callers' tasks wake one turn after the appends they await
        assert not engine.queue and not part._inflight_pids and not part._unapplied
        by_base = {base: (last, h) for base, last, h in engine.log}
        for pid, seq, out in outs:
            assert out.done()
            if out.exception() is not None:
                assert isinstance(out.exception(), KafkaError)
                continue
            r = out.result()
            last, h = by_base[r.base_offset]
            assert (h.producer_id, h.base_sequence, last) == (pid, seq, r.last_offset)
        for pid in (PID, PID + 1):
            seqs = [h.base_sequence for _b, _l, h in engine.log if h.producer_id == pid]
            assert seqs == list(range(0, 2 * len(seqs), 2)), "contiguous, no duplicate, no gap"
            entry = part.producers.entries.get(pid)
            assert (entry.last_seq if entry else -1) == (seqs[-1] + 1 if seqs else -1)
        assert part.high_watermark == engine.log_end_offset

    asyncio.run(go())

"""One append path (issue 27): ``Partition`` has one method per kind of append, the same on every
storage engine; the engine contract's ``submit`` is the only thing that differs.

Two sides of it. On the local engine an append is complete at the call: no event loop is
needed, no future or task is made, and nothing is left in flight. On an engine that completes
later — here a third one, written in this file in a few lines over the local files, whose
appends complete only when the test says so — the same ``Partition`` methods hold the high
watermark below the batch until its producer state is applied, keep a producer's appends in
call order, and derive a marker's aborted-index entry in the same step, without any change to
the partition.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Generator

from appends import completed
from oncelog.broker.partitions.partition import Partition, await_appends
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError, KafkaStorageError
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)
PID = 7000


def _batch(seq: int, n: int = 2, *, pid: int = PID, transactional: bool = False) -> bytes:
    return records.build_batch([(None, b"v%d" % (seq + i), ()) for i in range(n)], producer_id=pid,
                               producer_epoch=0, base_sequence=seq, transactional=transactional, timestamp_ms=1)


def test_on_the_local_engine_every_kind_of_append_is_complete_at_the_call(tmp_path: Path) -> None:
    """No event loop runs here: an append that made a future or a task, or suspended, would fail
    (``completed`` drives the awaitable one step and requires it to be done)."""
    part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
    txn = _batch(0, transactional=True)
    assert completed(part.append_validated(txn, records.parse_header(txn), 1)).base_offset == 0
    coord = records.build_batch([(b"k", b"v", ())], timestamp_ms=1)
    assert completed(part.append_internal(coord, 2)).base_offset == 2
    assert completed(part.append_marker(PID, 0, False, 0, 3)) == 3
    assert completed(part.append_marker(PID, 0, False, 0, 3)) is None  # idempotent
    assert [a.producer_id for a in part.aborted.collect(0, 10)] == [PID]
    assert part.high_watermark == part.last_stable_offset == 4
    assert not part._inflight_pids and not part._unapplied
    part.close()


class _Later:
    """The PendingAppend of ``LaterEngine``: awaiting it waits for the test's go-ahead."""

    done = False

    def __init__(self, base: int, last: int, gate: asyncio.Future[None]) -> None:
        self.base_offset, self.last_offset, self._gate = base, last, gate

    def __await__(self) -> Generator[Any, None, None]:
        yield from self._gate.__await__()


class LaterEngine:
    """A third engine, for this test: the local files underneath, but an append completes only
    when ``release`` is called (as PostgreSQL's at its COMMIT, an object store's at its commit).
    Everything else is the local engine's."""

    def __init__(self, inner: PartitionLog) -> None:
        self._inner = inner
        self.gates: list[asyncio.Future[None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def submit(self, batch: Any, header: records.BatchHeader, now_ms: int, *, drained: tuple[int, ...] = ()) -> _Later:
        base, last = self._inner.append(batch, header, now_ms)  # visible in the files at once
        gate = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        return _Later(base, last, gate)

    def release(self, error: KafkaError | None = None) -> None:
        gate = self.gates.pop(0)
        gate.set_exception(error) if error is not None else gate.set_result(None)


def test_an_engine_that_completes_later_needs_no_change_to_the_partition(tmp_path: Path) -> None:
    inner = PartitionLog.open(tmp_path / "t-0", LogConfig(), 1)
    engine = LaterEngine(inner)
    part = Partition.recover(TP, engine, tmp_path / "t-0", LogConfig())  # type: ignore[arg-type]

    async def go() -> None:
        first, second = _batch(0, transactional=True), _batch(2, transactional=True)
        a = part.append_validated(first, records.parse_header(first), 1)
        # issue 29: the second continues the first (next sequence): pipelined, at once
        b = part.append_validated(second, records.parse_header(second), 1)
        await asyncio.sleep(0)
        assert inner.log_end_offset == 4 and len(engine.gates) == 2, "the second does not wait for the first"
        assert part.high_watermark == 0, "not visible before its producer state is applied"
        assert part.read(0, 1 << 20, read_committed=True).slices == []
        engine.release()
        for _ in range(100):
            if part.high_watermark == 2:
                break
            await asyncio.sleep(0)
        # the first's producer state is applied; the second's waits for its completion
        assert part.high_watermark == 2 and part.last_stable_offset == 0
        assert part.producers.entries[PID].last_seq == 1
        engine.release()
        results = await await_appends([a, b])
        assert [(r.base_offset, r.last_offset) for r in results] == [(0, 1), (2, 3)]
        assert not part._inflight_pids and not part._unapplied

        marker = part.append_marker(PID, 0, False, 0, 2)
        await asyncio.sleep(0)
        engine.release()
        assert await marker == 4
        assert [a.producer_id for a in part.aborted.collect(0, 10)] == [PID]
        assert part.high_watermark == part.last_stable_offset == 5

        # an append the engine fails: its KafkaError is the awaited outcome, nothing is applied
        third = _batch(4)
        c = part.append_validated(third, records.parse_header(third), 3)
        await asyncio.sleep(0)
        engine.release(KafkaStorageError("the store went away"))
        outcome, = await await_appends([c])
        assert isinstance(outcome, KafkaStorageError)
        assert part.producers.entries[PID].last_seq == 3 and not part._unapplied

    asyncio.run(go())
    part.close()

"""The diskless engine (storage/engines/diskless/log.py, issue 29) on issue 27's contract, without
an object store: ``submit`` assigns offsets at once and returns a ``PendingAppend`` that completes
when the object writer's future does (its object's COMMIT), awaited on the event loop; a failed
append stops the partition's later appends; the capabilities say what the broker asks instead of
the engine's type (no compaction, an outbox, no local files). The writer here is a recording
stand-in for ``ObjectCommitter``; the real writer, object store and PostgreSQL are tested in
tests/diskless/."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from oncelog.cluster.leadership import Leadership
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaStorageError
from oncelog.storage.config import LogConfig
from oncelog.storage.engine import PartitionEngine
from oncelog.storage.engines.diskless.log import Committed, DisklessPartitionLog, ObjectAppend


class _Writer:
    """Records what the engine submits; the test completes the futures."""

    def __init__(self) -> None:
        self.reqs: list[ObjectAppend] = []
        self.listeners: dict[int, object] = {}

    def submit(self, req: ObjectAppend) -> Future:
        self.reqs.append(req)
        return req.future

    def register(self, partition_id: int, listener: object) -> None:
        self.listeners[partition_id] = listener

    def unregister(self, partition_id: int, listener: object) -> None:
        self.listeners.pop(partition_id, None)


class _Cache:
    max_bytes = 1 << 20

    def get(self, key: str, offset: int) -> bytes | None:
        return None

    def error(self, key: str, offset: int) -> None:
        return None

    def load(self, key: str, ranges: object, on_done: object) -> None:
        pass


def _engine(writer: _Writer, end: int = 5) -> DisklessPartitionLog:
    lead = Leadership(42, "dl", 0, 1, 3, 0, end)
    return DisklessPartitionLog(None, writer, lead, LogConfig(), _Cache())  # type: ignore[arg-type]


def _batch(n: int) -> tuple[bytes, records.BatchHeader]:
    data = records.build_batch([(None, b"v%d" % i, ()) for i in range(n)], timestamp_ms=1_000)
    return data, records.parse_header(data)


def test_submit_assigns_offsets_at_once_and_completes_at_the_object_commit() -> None:
    writer = _Writer()
    plog = _engine(writer)
    assert isinstance(plog, PartitionEngine)
    first = plog.submit(*_batch(3), 0)
    second = plog.submit(*_batch(2), 0)
    assert (first.base_offset, first.last_offset, second.base_offset, second.last_offset) == (5, 7, 8, 9)
    assert not first.done and plog.log_end_offset == 5  # visible only after the COMMIT
    sent = writer.reqs[0]
    assert (sent.partition_id, sent.leader_epoch, sent.base_offset, sent.last_offset) == (42, 3, 5, 7)
    header = records.parse_header(sent.data)  # offsets and epoch stamped outside the CRC
    assert (header.base_offset, header.partition_leader_epoch) == (5, 3)

    async def commit_then_await() -> None:
        threading.Thread(target=lambda: [r.future.set_result(None) for r in writer.reqs]).start()
        await asyncio.wait_for(asyncio.gather(first, second), 10)

    asyncio.run(commit_then_await())
    assert plog.log_end_offset == 10 and plog.failed is None


def test_a_failed_append_stops_the_partitions_later_appends() -> None:
    writer = _Writer()
    plog = _engine(writer)
    pending = plog.submit(*_batch(1), 0)
    err = KafkaStorageError("object store down")
    writer.reqs[0].future.set_exception(err)

    async def wait() -> None:
        with pytest.raises(KafkaStorageError):
            await pending

    asyncio.run(wait())
    assert plog.failed is err and plog.log_end_offset == 5
    with pytest.raises(KafkaStorageError):
        plog.submit(*_batch(1), 0)
    assert len(writer.reqs) == 1  # nothing more handed to the writer


def test_cancelling_the_waiter_leaves_the_append_to_complete() -> None:
    """A task awaiting an append may be cancelled (a stopping broker cancels its tasks); the
    batch is in the writer and may still commit, so its future is not cancelled with the waiter
    and the engine takes the commit in (the log end moves). Before: ``asyncio.wrap_future``
    cancelled the writer's future, and the engine's done-callback raised CancelledError."""
    writer = _Writer()
    plog = _engine(writer)
    pending = plog.submit(*_batch(2), 0)

    async def cancel_the_waiter() -> None:
        waiter = asyncio.ensure_future(_await(pending))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(cancel_the_waiter())
    fut = writer.reqs[0].future
    assert not fut.cancelled()
    assert fut.set_running_or_notify_cancel()
    fut.set_result(None)  # the object committed after all
    assert plog.log_end_offset == 7 and plog.failed is None


async def _await(pending: object) -> None:
    await pending  # type: ignore[misc]


def test_capabilities_instead_of_the_engines_type() -> None:
    writer = _Writer()
    plog = _engine(writer)
    assert plog.outbox_id == 42  # issue 31: the outbox drainer drains it like any partition
    assert plog.disk_usage() == (-1, -1)
    assert plog.plan_compaction(10, 0, threading.Event()) is None  # compact is refused at the topic
    assert writer.reqs == []
    assert 42 in writer.listeners
    writer.listeners[42]([Committed(5, 5, 80, "k", 0, 3, None)])  # type: ignore[operator]
    plog.close()
    assert 42 not in writer.listeners


def test_drained_outbox_rows_ride_to_the_writer_with_their_batch() -> None:
    """Issue 31: the ids of the outbox rows a batch holds go to the object writer, whose commit
    deletes them with the batch's coordinates (tests/diskless/test_diskless_outbox.py)."""
    writer = _Writer()
    plog = _engine(writer)
    plog.submit(*_batch(2), 0, drained=(7, 9))
    plog.submit(*_batch(1), 0)
    assert [r.drained for r in writer.reqs] == [(7, 9), ()]

"""The verification guard (Kafka's, KIP-890 part 1): a transactional batch that waits at its
partition for the coordinator's verification is refused, INVALID_TXN_STATE, when a marker for
its producer comes meanwhile (``Partition.append_produced``).

Without it, a client that ends its transaction while a Produce is still unanswered (or a
hostile one doing it on purpose: the Produce to the leader and the EndTxn to the coordinator on
two connections at once) gets its batch appended *after* the marker. The batch then opens a
transaction that no coordinator knows, and the partition's LSO stays behind it. In cluster mode
the window is the verification's round trip to the coordinator's broker. Here the coordinator's
answer is a future the test completes, on a real partition log (local files).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.broker.partitions.partition import Partition
from oncelog.protocol import records
from oncelog.protocol.errors import InvalidProducerEpoch, InvalidTxnState
from oncelog.storage.config import LogConfig
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)
PID = 4242


def _txn_batch(seq: int, epoch: int = 0) -> bytes:
    return records.build_batch([(None, b"v%d" % seq, ())], producer_id=PID, producer_epoch=epoch,
                               base_sequence=seq, transactional=True, timestamp_ms=1)


class _Coordinator:
    """The verification of every transactional batch: a future the test completes (None when
    the batch needs none: its transaction is open here already)."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[None]] = []

    def __call__(self, tp: TopicPartition, header: records.BatchHeader, part: Partition) -> asyncio.Future[None] | None:
        if not header.is_transactional or part.has_open_transaction(header.producer_id, header.producer_epoch):
            return None
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        return fut


async def _append(part: Partition, batch: bytes, verify: _Coordinator, **kw: bool) -> asyncio.Task:
    """Start the Produce's append of ``batch`` and let it reach its wait for the verification."""
    task = asyncio.ensure_future(part.append_produced(batch, records.parse_header(batch), 1, verify, **kw))
    await asyncio.sleep(0)
    assert not task.done() and verify.pending, "the batch should be waiting for its verification"
    return task


def test_a_marker_during_the_verification_refuses_the_batch(tmp_path: Path) -> None:
    async def main() -> None:
        part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
        verify = _Coordinator()
        task = await _append(part, _txn_batch(0), verify)
        # the transaction ends (an ABORT marker: nothing of it is here yet) while the coordinator's
        # yes to the batch is on its way
        assert await part.append_marker(PID, 0, False, 0, 1) is None
        verify.pending[0].set_result(None)
        with pytest.raises(InvalidTxnState, match="marker"):
            await task
        assert part.log.log_end_offset == 0, "nothing of the refused batch is in the log"
        assert not part.has_open_transaction(PID)
        assert part.last_stable_offset == part.high_watermark == 0
        assert part._verifying == {}, "the guard is gone with its verification"
        # the producer's next transaction, verified without a marker in between, is appended
        task = await _append(part, _txn_batch(0), verify)
        verify.pending[1].set_result(None)
        result = await task
        assert result.base_offset == 0 and part.has_open_transaction(PID)
        part.close()

    asyncio.run(main())


def test_without_a_marker_the_verified_batch_is_appended(tmp_path: Path) -> None:
    async def main() -> None:
        part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
        verify = _Coordinator()
        task = await _append(part, _txn_batch(0), verify)
        verify.pending[0].set_result(None)
        assert (await task).base_offset == 0
        assert part.has_open_transaction(PID, 0)
        assert part._verifying == {}
        part.close()

    asyncio.run(main())


def test_a_refused_verification_leaves_no_guard(tmp_path: Path) -> None:
    async def main() -> None:
        part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
        verify = _Coordinator()
        task = await _append(part, _txn_batch(0), verify)
        verify.pending[0].set_exception(InvalidTxnState("not in the transaction"))
        with pytest.raises(InvalidTxnState, match="not in the transaction"):
            await task
        assert part._verifying == {} and part.log.log_end_offset == 0
        part.close()

    asyncio.run(main())


def test_a_zombie_coordinators_marker_does_not_refuse_the_batch(tmp_path: Path) -> None:
    """A marker the partition refuses anyway (an older producer epoch than the producer's
    here) ends nothing, so the batch being verified is still appended."""
    async def main() -> None:
        part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
        verify = _Coordinator()
        # epoch 1's first transaction: verified, appended, committed
        task = await _append(part, _txn_batch(0, epoch=1), verify)
        verify.pending[0].set_result(None)
        await task
        assert await part.append_marker(PID, 1, True, 0, 1) is not None
        # its next transaction's first batch waits for its verification; a marker of epoch 0 comes
        task = await _append(part, _txn_batch(1, epoch=1), verify)
        assert await part.append_marker(PID, 0, False, 0, 1) is None
        verify.pending[1].set_result(None)
        assert (await task).base_offset == 2  # after the first batch and its marker
        assert part.has_open_transaction(PID, 1)
        part.close()

    asyncio.run(main())


def test_version_2_adds_are_not_guarded(tmp_path: Path) -> None:
    """Under transactions version 2 the verification is the coordinator's add, refused
    retriably until the previous transaction's markers are all written; the Produce handler
    passes ``guarded=False``."""
    async def main() -> None:
        part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
        verify = _Coordinator()
        task = await _append(part, _txn_batch(0), verify, guarded=False)
        assert await part.append_marker(PID, 0, False, 0, 1) is None
        verify.pending[0].set_result(None)
        assert (await task).base_offset == 0
        assert part._verifying == {}
        part.close()

    asyncio.run(main())


def test_a_fencing_marker_during_the_verification_is_invalid_producer_epoch(tmp_path: Path) -> None:
    """A marker of a newer producer epoch (the coordinator aborted the transaction on its
    timeout and bumped the epoch) refuses the batch as the append would after it:
    INVALID_PRODUCER_EPOCH, which a client treats as its epoch fenced, not INVALID_TXN_STATE."""
    async def main() -> None:
        part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
        verify = _Coordinator()
        task = await _append(part, _txn_batch(0, epoch=3), verify)
        assert await part.append_marker(PID, 4, False, 0, 1) is None
        verify.pending[0].set_result(None)
        with pytest.raises(InvalidProducerEpoch, match="epoch 4"):
            await task
        assert part.log.log_end_offset == 0 and part._verifying == {}
        part.close()

    asyncio.run(main())

"""The verification guard of transactional offsets (R13, R17; Kafka's group coordinator keeps it
for TxnOffsetCommit as the partition leader keeps it for Produce, KIP-890 part 1).

A TxnOffsetCommit is checked with the transaction coordinator first (elsewhere in cluster mode:
a round trip; or it waits for the group's lock), then written as a transactional batch of the
producer into the group's ``__consumer_offsets`` partition. When the transaction's marker comes
in between (a client that ended its transaction without waiting for the answer; a timeout's
abort), the offsets must be refused: written after the marker they would be pending offsets of
a transaction that has ended, opening a transaction on the partition that no coordinator knows,
and the producer's NEXT transaction's COMMIT would make them the group's offsets.

Driven in-process on a real ReplicaManager and GroupCoordinator; the verification is an
awaitable the test holds open while it writes the marker, as a coordinator on another broker
would answer late."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.group_config import FILE_NAME, FileGroupConfigs, GroupConfigs
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from oncelog.broker.coordinators.offset_inbox import NoInbox
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import ManualClock
from oncelog.coordinator.group.types import OffsetCommitData
from oncelog.protocol.errors import InvalidTxnState, KafkaError, ProducerFenced
from oncelog.types import TopicPartition

T0 = TopicPartition("t", 0)
PID = 4242


def _config(tmp: Path) -> BrokerConfig:
    return dataclasses.replace(BrokerConfig(), data_dir=tmp, offsets_topic_num_partitions=3,
                               group_initial_rebalance_delay_ms=0)


async def _coordinator(tmp: Path, clock: ManualClock) -> tuple[ReplicaManager, GroupCoordinator]:
    rm = ReplicaManager(_config(tmp), clock)
    rm.open()
    rm.create_topic(OFFSETS_TOPIC, 3, 1, {"cleanup.policy": "compact"}, internal=True)
    rm.create_topic("t", 1)
    gc = GroupCoordinator(rm, _config(tmp), clock, inbox=NoInbox(), configs=GroupConfigs(FileGroupConfigs(tmp / FILE_NAME)))
    gc.start()
    await asyncio.wait_for(gc.loaded.wait(), 10)
    return rm, gc


async def _marker(rm: ReplicaManager, gc: GroupCoordinator, group: str, epoch: int, commit: bool, now: int) -> None:
    """The transaction coordinator's marker on the group's offsets partition (markers.begin_local)."""
    p = gc.partition_for(group)
    await rm.partition(OFFSETS_TOPIC, p).append_marker(PID, epoch, commit, 0, now)
    gc.complete_transaction(p, PID, commit)


def _held_verification() -> tuple[asyncio.Event, Callable[[], Awaitable[None]]]:
    """A verification that answers (yes) once the event is set: a coordinator elsewhere,
    answering late."""
    answer = asyncio.Event()

    async def verify() -> None:
        await answer.wait()

    return answer, verify


def _committed(gc: GroupCoordinator, group: str) -> int | None:
    o = gc.shards[gc.partition_for(group)].offsets.committed.get(group, {}).get(T0)
    return None if o is None else o.offset


@pytest.mark.parametrize("marker_epoch, refusal", [(0, InvalidTxnState), (1, ProducerFenced)])
def test_offsets_verified_while_their_transaction_ended_are_refused(
        tmp_path: Path, marker_epoch: int, refusal: type[KafkaError]) -> None:
    """Offsets 10 are written in the transaction; a second TxnOffsetCommit (offsets 20) is being
    verified when the transaction's COMMIT marker is written (epoch 0: the client's own EndTxn;
    epoch 1: an abort that bumped it). The second is refused; the group's offset is 10 and the
    partition has no transaction of the producer open. The producer's next transaction then
    commits without offsets: the group's offset stays 10 (the old code wrote offsets 20 after
    the marker, and this commit made them the group's)."""
    group = "copy"

    async def go() -> tuple[BaseException | None, bool, int | None, int | None]:
        clock = ManualClock()
        rm, gc = await _coordinator(tmp_path, clock)
        try:
            await gc.txn_commit_offsets(group, PID, 0, -1, "", None, {T0: OffsetCommitData(10)})
            answer, verify = _held_verification()

            late = asyncio.ensure_future(gc.txn_commit_offsets(group, PID, 0, -1, "", None, {T0: OffsetCommitData(20)},
                                                               verify=verify))
            await asyncio.sleep(0.01)
            await _marker(rm, gc, group, marker_epoch, True, clock.now_ms())
            answer.set()
            await asyncio.wait([late], timeout=5)
            refused = late.exception()
            part = rm.partition(OFFSETS_TOPIC, gc.partition_for(group))
            open_after = PID in part.producers.ongoing
            after_first = _committed(gc, group)
            await _marker(rm, gc, group, marker_epoch, True, clock.now_ms())  # the next transaction's commit
            return refused, open_after, after_first, _committed(gc, group)
        finally:
            await gc.stop()
            rm.close()

    refused, open_after, after_first, after_next = asyncio.run(go())
    assert isinstance(refused, refusal), refused
    assert not open_after, "the refused offsets opened a transaction on __consumer_offsets"
    assert after_first == 10 and after_next == 10


def test_offsets_verified_without_a_marker_are_written_and_committed(tmp_path: Path) -> None:
    """The guard refuses nothing when no marker came: a held verification, then the offsets are
    pending, and the transaction's COMMIT makes them the group's."""
    group = "copy"

    async def go() -> tuple[int | None, int | None]:
        clock = ManualClock()
        rm, gc = await _coordinator(tmp_path, clock)
        try:
            answer, verify = _held_verification()

            pending = asyncio.ensure_future(gc.txn_commit_offsets(group, PID, 0, -1, "", None,
                                                                  {T0: OffsetCommitData(30)}, verify=verify))
            await asyncio.sleep(0.01)
            answer.set()
            assert (await asyncio.wait_for(pending, 5)) == {T0: None}
            before = _committed(gc, group)
            await _marker(rm, gc, group, 0, True, clock.now_ms())
            return before, _committed(gc, group)
        finally:
            await gc.stop()
            rm.close()

    assert asyncio.run(go()) == (None, 30)


def test_a_stale_marker_refuses_nothing(tmp_path: Path) -> None:
    """A zombie coordinator's marker (an older producer epoch than the partition has) ends no
    transaction, so the offsets being verified meanwhile are written."""
    group = "copy"

    async def go() -> dict:
        clock = ManualClock()
        rm, gc = await _coordinator(tmp_path, clock)
        try:
            await gc.txn_commit_offsets(group, PID, 3, -1, "", None, {T0: OffsetCommitData(1)})
            answer, verify = _held_verification()

            late = asyncio.ensure_future(gc.txn_commit_offsets(group, PID, 3, -1, "", None,
                                                               {T0: OffsetCommitData(2)}, verify=verify))
            await asyncio.sleep(0.01)
            p = gc.partition_for(group)
            with pytest.raises(KafkaError):  # refused by the partition: epoch 2 < 3
                await rm.partition(OFFSETS_TOPIC, p).append_marker(PID, 2, False, 0, clock.now_ms())
            answer.set()
            return await asyncio.wait_for(late, 5)
        finally:
            await gc.stop()
            rm.close()

    assert asyncio.run(go()) == {T0: None}

"""The group coordinator service in-process, on a real ReplicaManager (R3, R4, R13):
COORDINATOR_LOAD_IN_PROGRESS until a partition is loaded, parked JoinGroup/SyncGroup answered
through futures, transactional offsets completed by a real marker, and the state a restarted
coordinator loads — also after ``__consumer_offsets`` was compacted — equals the live state."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.group_config import FILE_NAME, FileGroupConfigs, GroupConfigs
from oncelog.broker.coordinators.offset_inbox import NoInbox
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import ManualClock
from oncelog.coordinator.group.consumer_protocol import encode_assignment, encode_subscription
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from oncelog.coordinator.group.types import JoinRequest, OffsetCommitData
from oncelog.protocol.errors import CoordinatorLoadInProgress, MemberIdRequired
from oncelog.storage.engines.local.cleaner import Cleaner
from oncelog.types import TopicPartition
from appends import completed

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)



def _configs(tmp: Path) -> GroupConfigs:
    """The groups' configs in the data dir, as the embedded membership keeps them."""
    return GroupConfigs(FileGroupConfigs(tmp / FILE_NAME))

def _config(tmp: Path) -> BrokerConfig:
    return dataclasses.replace(BrokerConfig(), data_dir=tmp, offsets_topic_num_partitions=3,
                               group_initial_rebalance_delay_ms=0)


def _replicas(tmp: Path, clock: ManualClock, small_segments: bool = False) -> ReplicaManager:
    rm = ReplicaManager(_config(tmp), clock)
    rm.open()
    if OFFSETS_TOPIC not in rm.topics:
        configs = {"cleanup.policy": "compact"}
        if small_segments:
            configs["segment.bytes"] = "1024"
        rm.create_topic(OFFSETS_TOPIC, 3, 1, configs, internal=True)
        rm.create_topic("t", 2)
    return rm


async def _loaded(tmp: Path, clock: ManualClock) -> tuple[ReplicaManager, GroupCoordinator]:
    """A started coordinator on the data dir ``tmp``, every partition loaded."""
    rm = _replicas(tmp, clock)
    gc = GroupCoordinator(rm, _config(tmp), clock, inbox=NoInbox(), configs=_configs(tmp))
    gc.start()
    await asyncio.wait_for(gc.loaded.wait(), 10)
    return rm, gc


def _join(group: str, member_id: str = "", client: str = "c") -> JoinRequest:
    return JoinRequest(group, member_id, None, "consumer", (("range", encode_subscription(["t"])),), 10_000, 10_000,
                       client, "/127.0.0.1", require_known_member_id=True)


async def _member(gc: GroupCoordinator, group: str) -> tuple[str, int]:
    try:
        await gc.join_group(_join(group))
    except MemberIdRequired as exc:
        res = await gc.join_group(_join(group, exc.member_id))  # type: ignore[attr-defined]
    sync = await gc.sync_group(group, res.generation, res.member_id, None, "consumer", "range",
                               {res.member_id: encode_assignment({"t": [0, 1]})})
    assert sync.assignment
    return res.member_id, res.generation


def test_requests_wait_for_loading_then_parked_joins_are_answered(tmp_path: Path) -> None:
    async def go() -> None:
        clock = ManualClock()
        rm = _replicas(tmp_path, clock)
        gc = GroupCoordinator(rm, _config(tmp_path), clock, inbox=NoInbox(), configs=_configs(tmp_path))
        gc.start()
        with pytest.raises(CoordinatorLoadInProgress):
            await gc.join_group(_join("g"))
        with pytest.raises(CoordinatorLoadInProgress):
            gc.fetch_offsets("g", [T0], False)
        await asyncio.wait_for(gc.loaded.wait(), 10)
        member, generation = await _member(gc, "g")
        assert await gc.commit_offsets("g", generation, member, None, {T0: OffsetCommitData(3)}) == {T0: None}
        # a second member: its JoinGroup is parked until the first rejoins
        try:
            await gc.join_group(_join("g", client="b"))
        except MemberIdRequired as exc:
            second = asyncio.ensure_future(gc.join_group(_join("g", exc.member_id, client="b")))  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        assert not second.done()
        first = await gc.join_group(_join("g", member))
        assert (await second).generation == first.generation == generation + 1
        await gc.stop()
        rm.close()

    asyncio.run(go())


def _state(gc: GroupCoordinator) -> tuple[dict, dict, dict]:
    committed, groups, pending = {}, {}, {}
    for p, shard in gc.shards.items():
        committed.update({(g, tp): (o.offset, o.metadata) for g, offs in shard.offsets.committed.items() for tp, o in offs.items()})
        pending.update({(p, pid): {g: sorted(o) for g, o in gs.items()} for pid, gs in shard.offsets.pending.items()})
        groups.update({g: (x.state.value, x.generation, sorted(x.members)) for g, x in shard.groups.items()})
    return committed, groups, pending


@pytest.mark.parametrize("compact", [False, True])
def test_restart_loads_the_live_state_also_after_compaction(tmp_path: Path, compact: bool) -> None:
    async def live() -> tuple:
        clock = ManualClock()
        rm = _replicas(tmp_path, clock, small_segments=True)
        gc = GroupCoordinator(rm, _config(tmp_path), clock, inbox=NoInbox(), configs=_configs(tmp_path))
        gc.start()
        await asyncio.wait_for(gc.loaded.wait(), 10)
        member, generation = await _member(gc, "stable")
        for i in range(60):  # many commits: many segments of superseded records
            await gc.commit_offsets("stable", generation, member, None, {T0: OffsetCommitData(i), T1: OffsetCommitData(2 * i)})
            await gc.commit_offsets(f"simple-{i % 5}", -1, "", None, {T0: OffsetCommitData(i, metadata="x" * 20)})
        gone_member, gone_gen = await _member(gc, "gone")
        await gc.commit_offsets("gone", gone_gen, gone_member, None, {T0: OffsetCommitData(1)})
        await gc.leave_group("gone", [(gone_member, None)])
        await gc.delete_group("gone")
        for pid, commit in ((1000, True), (1001, False), (1002, None)):  # None: still open
            group = f"txn-{pid}"
            await gc.txn_commit_offsets(group, pid, 0, -1, "", None, {T1: OffsetCommitData(pid)})
            if commit is not None:
                p = gc.partition_for(group)
                completed(rm.partition(OFFSETS_TOPIC, p).append_marker(pid, 0, commit, 0, clock.now_ms()))
                gc.complete_transaction(p, pid, commit)
        state = _state(gc)
        await gc.stop()
        before = sum(rm.partition(OFFSETS_TOPIC, p).log.size_bytes for p in range(3))
        if compact:
            cleaner = Cleaner()
            for p in range(3):
                part = rm.partition(OFFSETS_TOPIC, p)
                part.log.maybe_roll(clock.now_ms() + 10**9)  # make everything cleanable
                cleaner.clean(part.log, part.last_stable_offset, clock.now_ms() + 2 * 86_400_000, force=True)
        after = sum(rm.partition(OFFSETS_TOPIC, p).log.size_bytes for p in range(3))
        rm.close()
        return state, (before, after)

    async def reloaded() -> tuple:
        rm, gc = await _loaded(tmp_path, ManualClock())
        state = _state(gc)
        await gc.stop()
        rm.close()
        return state

    (committed, groups, pending), (before, after) = asyncio.run(live())
    if compact:
        assert after < before / 3, f"__consumer_offsets compacted from {before} to {after} bytes"
    assert committed[("txn-1000", T1)] == (1000, "") and ("txn-1001", T1) not in committed
    assert "gone" not in groups and groups["stable"][0] == "Stable"
    again = asyncio.run(reloaded())
    assert again[0] == committed
    assert again[2] == pending, "the open transaction's offsets are pending again"
    assert {g: v for g, v in again[1].items()} == groups


def test_thousands_of_members_leaving_at_once_are_written_in_several_batches(tmp_path: Path) -> None:
    """1,200 KIP-848 members with 1 KB member ids time out together: their 3,600 tombstones (about
    3.7 MB) exceed a batch (message.max.bytes), so they are written in batches of at most 512 KiB;
    the group then serves a new member and a restarted coordinator loads it empty. Before: one
    batch, MESSAGE_TOO_LARGE at every tick, the log holding the members for ever."""
    from oncelog.coordinator.group import consumer_group as cg

    async def go() -> None:
        clock = ManualClock()
        rm, gc = await _loaded(tmp_path, clock)

        def join(member: str) -> cg.HeartbeatRequest:
            return cg.HeartbeatRequest("big", member, 0, None, None, 30_000, ("t",), None, None, {})

        for i in range(1_200):
            await gc.consumer_heartbeat(join(f"{i:05d}-" + "m" * 1_000))
        shard = gc.shards[gc.partition_for("big")]
        assert len(shard.consumers.groups["big"].members) == 1_200
        clock.advance(60_000)  # past the session timeout (45 s)
        for _ in range(100):  # the timer loop removes them (bounded wait)
            await asyncio.sleep(0.05)
            if not shard.consumers.groups["big"].members:
                break
        assert not shard.consumers.groups["big"].members
        assert len(shard.consumer_written["big"]) == 3  # the group's own records only
        answer = await gc.consumer_heartbeat(join("fresh"))
        assert answer.member_epoch > 0 and answer.assignment
        await gc.stop()
        rm.close()
        rm2, gc2 = await _loaded(tmp_path, clock)
        assert list(gc2.shards[gc2.partition_for("big")].consumers.groups["big"].members) == ["fresh"]
        await gc2.stop()
        rm2.close()

    asyncio.run(go())

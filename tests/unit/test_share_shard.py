"""The share coordinator's pure core (coordinator/share/shard.py, KIP-932): driven directly with
a log of real record batches and the time passed in, no event loop and no storage (issue 36:
the share coordinator became this core plus a thin asyncio shell)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from oncelog.coordinator.share import records as srec
from oncelog.coordinator.share.partition import AckType, AcquiredRange
from oncelog.coordinator.share.shard import TURN_GRACE_MS, PartKey, ShareSettings, ShareShard
from oncelog.protocol import records

TID = uuid.UUID(int=7)
PK: PartKey = ("g", TID, 0)


@dataclass
class Log:
    """A partition's log as the core reads it (``shard.LogView``): batches of 5 records each."""

    batches_: list[tuple[records.BatchHeader, bytes]] = field(default_factory=list)
    reads: int = 0  # batches handed out (the core reads only as far as it needs)

    def append(self, n: int = 5, ts: int = 1_000) -> None:
        base = self.high_watermark
        batch = bytearray(records.build_batch([(None, b"v", [])] * n, timestamp_ms=ts))
        batch[0:8] = base.to_bytes(8, "big")
        self.batches_.append((records.parse_header(bytes(batch)), bytes(batch)))

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def high_watermark(self) -> int:
        return self.batches_[-1][0].last_offset + 1 if self.batches_ else 0

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    def batches(self, start: int) -> Iterator[tuple[records.BatchHeader, bytes]]:
        for h, data in self.batches_:
            if h.last_offset >= start:
                self.reads += 1
                yield h, data

    def aborted(self, start: int, upper: int) -> list[Any]:
        return []

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, ...] | None:
        for h, _ in self.batches_:
            if h.max_timestamp >= timestamp_ms:
                return (h.base_offset,)
        return None


def _shard(**kw: Any) -> tuple[ShareShard, list[PartKey]]:
    woken: list[PartKey] = []
    return ShareShard(ShareSettings(**kw), on_available=woken.append), woken


def _log(batches: int) -> Log:
    log = Log()
    for _ in range(batches):
        log.append()
    return log


def test_a_fetch_reads_the_log_only_as_far_as_the_records_it_acquires() -> None:
    shard, _ = _shard()
    log = _log(20)
    shard.configs["g"] = {"share.auto.offset.reset": "earliest"}
    assert shard.open_partition(PK, log, now=0) is True  # fresh: its start offset is written first
    ranges, data = shard.acquire(PK, "m", log, records_left=7, budget=1 << 20, now=0)
    assert ranges == [AcquiredRange(0, 9, 1)]  # whole batches: the second one is started
    assert len(data) == 2 and log.reads <= 3
    assert shard.open_partition(PK, log, now=0) is False


def test_the_start_offset_follows_share_auto_offset_reset() -> None:
    log = Log()
    for ts in (1_000, 2_000, 3_000):
        log.append(ts=ts)
    for reset, start in (("latest", 15), ("earliest", 0), ("by_duration:PT1.5S", 5)):
        shard, _ = _shard()
        shard.configs["g"] = {"share.auto.offset.reset": reset}
        shard.open_partition(PK, log, now=3_500)
        assert shard.partitions[PK].spso == start, reset


def test_at_the_lock_limit_fetches_wait_in_line_and_a_finished_fetch_keeps_its_place() -> None:
    shard, woken = _shard(max_locks=5)
    log = _log(4)
    shard.configs["g"] = {"share.auto.offset.reset": "earliest"}
    shard.open_partition(PK, log, now=0)
    assert shard.acquire(PK, "a", log, 5, 1 << 20, now=0)[0] == [AcquiredRange(0, 4, 1)]
    assert shard.acquire(PK, "b", log, 5, 1 << 20, now=0) == ([], [])  # held up to the limit: b waits
    shard.acknowledge(PK, "a", [(0, 4, (AckType.ACCEPT,))], now=1)
    assert shard.acquire(PK, "a", log, 5, 1 << 20, now=1) == ([], [])  # room, but it is b's turn
    shard.fetch_ended("g", "b", [(TID, 0)], now=1)  # b between two fetches keeps its place ...
    assert shard.acquire(PK, "a", log, 5, 1 << 20, now=1 + TURN_GRACE_MS - 1) == ([], [])
    assert shard.acquire(PK, "b", log, 5, 1 << 20, now=2)[0] == [AcquiredRange(5, 9, 1)]
    shard.member_gone("g", "b")
    assert shard.release_member("g", "b", now=3) == [PK]
    assert woken == []  # waking parked fetches is the shell's, after a change it makes durable


def test_locks_expire_from_the_heap_and_the_state_replays() -> None:
    shard, _ = _shard(lock_ms=100)
    log = _log(2)
    shard.configs["g"] = {"share.auto.offset.reset": "earliest"}
    shard.open_partition(PK, log, now=0)
    shard.acquire(PK, "m", log, 10, 1 << 20, now=0)
    assert not shard.locks_due(99) and shard.expire_locks(99) == []
    assert shard.locks_due(100) and shard.expire_locks(100) == [PK]
    again, woken = _shard()
    for key, value in shard.snapshots([PK]):
        again.replay(key, value)
    assert again.partitions[PK].snapshot() == shard.partitions[PK].snapshot()
    again.replay(srec.SnapshotKey(*PK), None)
    assert PK not in again.partitions and woken == [PK]  # a share partition dropped wakes its fetches


def test_group_configs_reach_the_share_partitions_held() -> None:
    shard, _ = _shard(lock_ms=30_000, delivery_limit=5)
    log = _log(1)
    shard.open_partition(PK, log, now=0)
    shard.set_configs("g", {"share.record.lock.duration.ms": "2000", "share.delivery.count.limit": "3"})
    sp = shard.partitions[PK]
    assert (sp.lock_ms, sp.delivery_limit) == (2000, 3)
    shard.set_configs("g", None)
    assert (sp.lock_ms, sp.delivery_limit) == (30_000, 5) and "g" not in shard.configs

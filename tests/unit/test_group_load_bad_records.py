"""Loading ``__consumer_offsets`` never stops on a bad record (R22, with R3/R13 for what must
survive): a record or batch the group coordinator cannot decode or replay is logged with its
topic-partition and offset and skipped; the partition still finishes loading (no
COORDINATOR_LOAD_IN_PROGRESS forever) and every offset committed around it is there. Driven
through the real GroupCoordinator on a real ReplicaManager in a temporary data directory."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from pathlib import Path

import pytest

import bad_batches
from oncelog.broker.configuration.config import BrokerConfig
from oncelog.broker.configuration.group_config import FILE_NAME, FileGroupConfigs, GroupConfigs
from oncelog.broker.coordinators.offset_inbox import NoInbox
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import ManualClock
from oncelog.coordinator.group import records as rec
from oncelog.broker.coordinators.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.types import OffsetCommitData
from oncelog.protocol import records
from oncelog.types import TopicPartition
from appends import completed

T0 = TopicPartition("t", 0)
PARTITIONS = 3



def _configs(tmp: Path) -> GroupConfigs:
    """The groups' configs in the data dir, as the embedded membership keeps them."""
    return GroupConfigs(FileGroupConfigs(tmp / FILE_NAME))

def _config(tmp: Path) -> BrokerConfig:
    return dataclasses.replace(BrokerConfig(), data_dir=tmp, offsets_topic_num_partitions=PARTITIONS,
                               group_initial_rebalance_delay_ms=0)


def _open(tmp: Path, clock: ManualClock, topic_configs: dict[str, str] | None = None) -> ReplicaManager:
    rm = ReplicaManager(_config(tmp), clock)
    rm.open()
    if OFFSETS_TOPIC not in rm.topics:
        rm.create_topic(OFFSETS_TOPIC, PARTITIONS, 1, {"cleanup.policy": "compact", **(topic_configs or {})}, internal=True)
        rm.create_topic("t", 1)
    return rm


async def _started(rm: ReplicaManager, tmp: Path, clock: ManualClock) -> GroupCoordinator:
    gc = GroupCoordinator(rm, _config(tmp), clock, inbox=NoInbox(), configs=_configs(tmp))
    gc.start()
    await asyncio.wait_for(gc.loaded.wait(), 10)
    return gc


def _offset_key(group: str, version: int = 1) -> bytes:
    g, t = group.encode(), b"t"
    return struct.pack(">hh", version, len(g)) + g + struct.pack(">h", len(t)) + t + struct.pack(">i", 0)


def _offset_value(offset: int) -> bytes:
    return rec.encode_value(rec.OffsetValue(offset=offset, metadata="", commit_timestamp=1))  # type: ignore[return-value]


BAD_RECORDS = {
    "garbage key and value": (b"k", b"v"),
    "garbage value": (_offset_key("g"), b"v"),
    "truncated value": (_offset_key("g"), _offset_value(99)[:-3]),
    "unknown key version": (_offset_key("g", version=7), _offset_value(99)),
    "unknown value version": (_offset_key("g"), struct.pack(">h", 9) + _offset_value(99)[2:]),
    "null key": (None, _offset_value(99)),
    "consumer-group member record with a garbage value": (b"\x00\x05\x00\x01g\x00\x01m", b"\x00\x00\xff\xff"),
    "consumer-group record of an unknown value version": (b"\x00\x03\x00\x01g", b"\x00\x07\x00\x00\x00\x01\x00"),
}
BAD_BATCHES = {
    "record count larger than the records": lambda b: bad_batches.with_records_count(b, 4),
    "payload does not decompress": bad_batches.with_garbage_compression,
    "last record cut short": bad_batches.with_truncated_record,
}


def _warnings(caplog: pytest.LogCaptureFixture, tp: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if tp in r.getMessage() and r.levelno >= logging.WARNING]


def _run_with_bad_batch(tmp: Path, make_batch, caplog: pytest.LogCaptureFixture) -> tuple[int, int, list]:  # type: ignore[no-untyped-def]
    """Commit 5 for g, append ``make_batch()`` to g's partition, commit 7; restart and fetch.
    Returns (partition, offset of the bad batch, fetched)."""

    async def go() -> tuple[int, int, list]:
        clock = ManualClock()
        rm = _open(tmp, clock)
        gc = await _started(rm, tmp, clock)
        assert await gc.commit_offsets("g", -1, "", None, {T0: OffsetCommitData(5)}) == {T0: None}
        p = gc.partition_for("g")
        bad = completed(rm.partition(OFFSETS_TOPIC, p).append_internal(make_batch(), clock.now_ms())).base_offset
        assert await gc.commit_offsets("g", -1, "", None, {T0: OffsetCommitData(7)}) == {T0: None}
        await gc.commit_offsets("h", -1, "", None, {T0: OffsetCommitData(3)})
        await gc.stop()
        rm.close()
        caplog.set_level(logging.INFO)
        rm = _open(tmp, clock)
        gc = await _started(rm, tmp, clock)
        assert not gc.loading
        fetched = [gc.fetch_offsets(g, [T0], False)[0][1].offset for g in ("g", "h")]  # type: ignore[union-attr]
        await gc.stop()
        rm.close()
        return p, bad, fetched

    return asyncio.run(go())


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_a_record_that_does_not_decode_is_logged_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str) -> None:
    key, value = BAD_RECORDS[name]
    p, bad, fetched = _run_with_bad_batch(tmp_path, lambda: records.build_batch([(key, value, [])], timestamp_ms=1), caplog)
    assert fetched == [7, 3]
    assert len([m for m in _warnings(caplog, f"{OFFSETS_TOPIC}-{p}") if f"offset {bad}" in m]) == 1, caplog.text


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_a_batch_whose_records_do_not_parse_is_logged_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str) -> None:
    def make() -> bytes:
        valid = records.build_batch([(_offset_key("g"), _offset_value(99), []), (_offset_key("g"), _offset_value(98), [])],
                                    timestamp_ms=1)
        return BAD_BATCHES[name](valid)

    p, bad, fetched = _run_with_bad_batch(tmp_path, make, caplog)
    assert fetched == [7, 3], "the records of a corrupt batch must not apply"
    assert len([m for m in _warnings(caplog, f"{OFFSETS_TOPIC}-{p}") if f"offset {bad}" in m]) == 1, caplog.text


def test_many_bad_records_are_summarised_not_logged_one_by_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """500 garbage records cost a dozen log lines at most, one of them a summary."""

    def make() -> bytes:
        return records.build_batch([(b"k%d" % i, b"v", []) for i in range(500)], timestamp_ms=1)

    p, bad, fetched = _run_with_bad_batch(tmp_path, make, caplog)
    assert fetched == [7, 3]
    lines = _warnings(caplog, f"{OFFSETS_TOPIC}-{p}")
    assert 2 <= len(lines) <= 13, f"{len(lines)} lines"
    assert any("500" in m and f"offsets {bad}..{bad + 499}" in m for m in lines), lines
    assert any(m.startswith("group coordinator: 500 unreadable") and f"{OFFSETS_TOPIC}-{p} (500)" in m for m in lines), lines


def test_a_record_whose_replay_fails_does_not_keep_the_partition_loading(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record that decodes but whose replay raises (a bug, or a value no code path expects)
    is logged with its offset and skipped; the partition's other groups load. Before, the
    whole partition stayed COORDINATOR_LOAD_IN_PROGRESS until the broker restarted."""
    real = GroupShard.replay

    def replay(self, key, value, **kw):  # type: ignore[no-untyped-def]
        if isinstance(value, rec.OffsetValue) and value.offset == 99:
            raise RuntimeError("injected replay failure")
        return real(self, key, value, **kw)

    def make() -> bytes:
        return records.build_batch([(_offset_key("g"), _offset_value(99), [])], timestamp_ms=1)

    async def go() -> None:
        clock = ManualClock()
        rm = _open(tmp_path, clock)
        gc = await _started(rm, tmp_path, clock)
        await gc.commit_offsets("g", -1, "", None, {T0: OffsetCommitData(5)})
        p = gc.partition_for("g")
        bad = completed(rm.partition(OFFSETS_TOPIC, p).append_internal(make(), clock.now_ms())).base_offset
        await gc.commit_offsets("g", -1, "", None, {T0: OffsetCommitData(7)})
        await gc.stop()
        rm.close()
        monkeypatch.setattr(GroupShard, "replay", replay)
        caplog.set_level(logging.INFO)
        rm = _open(tmp_path, clock)
        gc = await _started(rm, tmp_path, clock)
        assert not gc.loading, "a partition stayed loading"
        assert gc.fetch_offsets("g", [T0], False)[0][1].offset == 7  # type: ignore[union-attr]
        assert [m for m in _warnings(caplog, f"{OFFSETS_TOPIC}-{p}") if f"offset {bad}" in m], caplog.text
        await gc.stop()
        rm.close()

    asyncio.run(go())


def test_a_damaged_segment_does_not_keep_the_partition_loading(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A zeroed batch length inside an older segment of ``__consumer_offsets`` (bit rot, or a
    damaged disk): the batches the storage layer cannot read are reported and skipped, the rest
    of the partition loads. Before, loading raised KafkaStorageError and the partition's groups
    answered COORDINATOR_LOAD_IN_PROGRESS until the broker restarted."""
    small = {"segment.bytes": "4096", "index.interval.bytes": "200"}

    async def go() -> None:
        clock = ManualClock()
        rm = _open(tmp_path, clock, small)
        gc = await _started(rm, tmp_path, clock)
        p = gc.partition_for("g")
        assert gc.partition_for("early") == p
        await gc.commit_offsets("early", -1, "", None, {T0: OffsetCommitData(11)})
        for i in range(200):
            await gc.commit_offsets("g", -1, "", None, {T0: OffsetCommitData(i)})
        plog = rm.partition(OFFSETS_TOPIC, p).log
        assert len(plog.segments) >= 3
        await gc.stop()
        rm.close()
        first = plog.segments[0]
        damaged_at = bad_batches.zero_batch_length(first.log_path, batch_index=5)
        caplog.set_level(logging.INFO)
        rm = _open(tmp_path, clock, small)
        gc = await _started(rm, tmp_path, clock)
        assert not gc.loading, "a partition stayed loading"
        assert gc.fetch_offsets("g", [T0], False)[0][1].offset == 199  # type: ignore[union-attr]
        assert gc.fetch_offsets("early", [T0], False)[0][1].offset == 11  # type: ignore[union-attr]
        assert [m for m in _warnings(caplog, f"{OFFSETS_TOPIC}-{p}") if f"position {damaged_at}" in m], caplog.text
        await gc.stop()
        rm.close()

    asyncio.run(go())

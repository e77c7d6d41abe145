"""Leader epochs (storage/leader_epochs.py, KIP-320): Kafka's current-epoch check and its
end-offset rule, against a model of Kafka's LeaderEpochFileCache; the local engine's epochs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.protocol import records
from oncelog.protocol.errors import FencedLeaderEpoch, UnknownLeaderEpoch
from oncelog.storage.leader_epochs import check_current_epoch, end_offset_for_epoch
from oncelog.storage.config import LogConfig
from oncelog.storage.engines.local.log import PartitionLog


def test_current_epoch_check() -> None:
    check_current_epoch("t-0", -1, 5)
    check_current_epoch("t-0", 5, 5)
    with pytest.raises(FencedLeaderEpoch, match="t-0: current leader epoch 4 is older than the leader's 5"):
        check_current_epoch("t-0", 4, 5)
    with pytest.raises(UnknownLeaderEpoch, match="6 is newer"):
        check_current_epoch("t-0", 6, 5)


def _bounds_of(batches: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
    """``bounds`` over stored batches given as (base offset, leader epoch), epochs growing."""
    def bounds(epoch: int) -> tuple[int | None, int | None]:
        floor = max((e for _b, e in batches if e <= epoch), default=None)
        nxt = min((b for b, e in batches if e > epoch), default=None)
        return floor, nxt
    return bounds


def test_end_offsets_of_a_history() -> None:
    # epoch 1: offsets 0..9, epoch 2 wrote nothing, epoch 4: 10..14, current epoch 6 (nothing yet)
    batches = [(0, 1), (5, 1), (10, 4), (12, 4)]
    b = _bounds_of(batches)
    assert end_offset_for_epoch(6, 6, 15, b) == (6, 15)  # current: the log end
    assert end_offset_for_epoch(7, 6, 15, b) == (-1, -1)  # above the current: UNDEFINED
    assert end_offset_for_epoch(-1, 6, 15, b) == (-1, -1)
    assert end_offset_for_epoch(5, 6, 15, b) == (4, 15)  # epoch 4 ends where epoch 6 starts
    assert end_offset_for_epoch(4, 6, 15, b) == (4, 15)
    assert end_offset_for_epoch(3, 6, 15, b) == (1, 10)  # largest epoch <= 3 is 1, ended at 10
    assert end_offset_for_epoch(2, 6, 15, b) == (1, 10)
    assert end_offset_for_epoch(1, 6, 15, b) == (1, 10)
    assert end_offset_for_epoch(0, 6, 15, b) == (0, 0)  # below every epoch: the requested one, at
    # the start of the first known epoch
    assert end_offset_for_epoch(3, 6, 0, _bounds_of([])) == (3, 0)  # empty log


def test_bounds_are_not_asked_for_the_current_or_an_unknown_epoch() -> None:
    def never(epoch: int) -> tuple[int | None, int | None]:
        raise AssertionError("bounds asked")
    assert end_offset_for_epoch(3, 3, 9, never) == (3, 9)
    assert end_offset_for_epoch(4, 3, 9, never) == (-1, -1)
    assert end_offset_for_epoch(-1, 3, 9, never) == (-1, -1)


def _kafka_end_offset_for(requested: int, entries: list[tuple[int, int]], log_end: int) -> tuple[int, int]:
    """Kafka's LeaderEpochFileCache.endOffsetFor over (epoch, start offset) entries, the last
    one being the leader's current epoch (assigned when it became leader)."""
    if requested == -1:
        return -1, -1
    if entries and entries[-1][0] == requested:
        return requested, log_end
    higher = [(e, s) for e, s in entries if e > requested]
    if not higher:
        return -1, -1
    floor = [(e, s) for e, s in entries if e <= requested]
    if not floor:
        return requested, higher[0][1]
    return floor[-1][0], higher[0][1]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=12), st.integers(-1, 20))
def test_agrees_with_kafkas_epoch_cache(terms: list[tuple[int, int]], requested: int) -> None:
    """A history of leader terms (epoch increment, batches written); Kafka's cache keeps one
    entry per epoch that wrote, plus the current one (an epoch that wrote nothing is replaced by
    the next one assigned at the same offset)."""
    epoch, end, batches, entries = 0, 0, [], []  # type: ignore[var-annotated]
    for step, (inc, n) in enumerate(terms):
        epoch += inc + (1 if step else 0)
        entries = [(e, s) for e, s in entries if s < end and e < epoch] + [(epoch, end)]
        for _ in range(n):
            batches.append((end, epoch))
            end += 2
    if not entries:
        entries = [(0, 0)]
    current = epoch
    assert end_offset_for_epoch(requested, current, end, _bounds_of(batches)) == _kafka_end_offset_for(
        requested, entries, end)


def test_the_local_engine_writes_and_answers_epoch_zero(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=1)
    try:
        assert plog.leader_epoch == 0 and plog.epoch_bounds(0) == (None, None)
        batch = records.build_batch([(None, b"x", ())] * 3, timestamp_ms=1)
        plog.append(batch, records.parse_header(batch), now_ms=1)
        stored = plog.read_batches(0, 1 << 20)
        assert records.parse_header(stored).partition_leader_epoch == 0
        assert plog.epoch_bounds(0) == (0, None)
        assert plog.epoch_bounds(-2) == (None, 0)
        assert plog.epoch_at(0) == 0
        assert end_offset_for_epoch(0, plog.leader_epoch, plog.log_end_offset, plog.epoch_bounds) == (0, 3)
    finally:
        plog.close()

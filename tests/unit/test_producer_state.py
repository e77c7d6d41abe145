"""Producer state: sequence and epoch rules, duplicates, wrap-around, snapshots (R6, R7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import records
from oncelog.protocol.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber, UnknownProducerId
from oncelog.storage.producer_state import INT32_MAX, ProducerStateManager, next_sequence


def header(pid: int = 1000, epoch: int = 0, seq: int = 0, count: int = 1, base_offset: int = 0) -> records.BatchHeader:
    batch = records.build_batch(
        [(None, b"v", [])] * count, timestamp_ms=1, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        base_offset=base_offset,
    )
    return records.parse_header(batch)


class Log:
    """A pretend log: offsets assigned in order, state updated after each append."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.end = 0

    def append(self, h: records.BatchHeader) -> tuple[int, bool]:
        dup = self.state.check(h)
        if dup is not None:
            return dup.first_offset, True
        base = self.end
        self.end += h.last_offset_delta + 1
        self.state.update(h, base, now_ms=1)
        return base, False


def test_in_order_batches_are_accepted_and_duplicates_get_original_offset(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    assert log.append(header(seq=0, count=3)) == (0, False)
    assert log.append(header(seq=3, count=2)) == (3, False)
    assert log.append(header(seq=0, count=3)) == (0, True)
    assert log.append(header(seq=3, count=2)) == (3, True)
    assert log.end == 5


def test_gap_is_out_of_order(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(header(seq=0, count=2))
    with pytest.raises(OutOfOrderSequenceNumber, match="sequence 5 received, 2 expected"):
        log.append(header(seq=5))


def test_window_is_five_batches_older_replay_is_out_of_order(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    for i in range(6):
        log.append(header(seq=i))
    assert log.append(header(seq=1))[1] is True  # 5 newest: seq 1..5
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append(header(seq=0))


def test_stale_epoch_is_rejected_and_new_epoch_restarts_at_zero(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path))
    log.append(header(epoch=3, seq=0))
    with pytest.raises(InvalidProducerEpoch, match="epoch 2 is older than the current epoch 3"):
        log.append(header(epoch=2, seq=1))
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append(header(epoch=4, seq=7))
    assert log.append(header(epoch=4, seq=0))[1] is False


def test_unknown_producer_with_nonzero_sequence(tmp_path: Path) -> None:
    with pytest.raises(UnknownProducerId):
        ProducerStateManager(tmp_path).check(header(seq=9))


def test_sequence_wraps_after_int32_max(tmp_path: Path) -> None:
    assert next_sequence(INT32_MAX) == 0
    state = ProducerStateManager(tmp_path)
    log = Log(state)
    log.append(header(seq=0))
    # jump the remembered sequence close to the wrap point
    state.entries[1000].batches.append(
        type(state.entries[1000].batches[0])(INT32_MAX - 2, INT32_MAX - 2, 1, 1, 1)
    )
    h = header(seq=INT32_MAX - 1, count=3)  # INT32_MAX-1, INT32_MAX, 0
    assert h.last_sequence == 0
    assert log.append(h)[1] is False
    assert log.append(header(seq=1))[1] is False


def test_non_idempotent_batches_bypass_state(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    h = records.parse_header(records.build_batch([(None, b"v", [])], timestamp_ms=1))
    assert state.check(h) is None
    state.update(h, 0)
    assert state.entries == {}


def test_snapshot_round_trip_and_damaged_snapshot_ignored(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    log = Log(state)
    for i in range(4):
        log.append(header(pid=7, seq=i * 2, count=2))
    state.write_snapshot()
    again = ProducerStateManager(tmp_path)
    assert again.load_latest_snapshot(log_end_offset=log.end)
    assert again.map_end_offset == 8
    assert again.check(header(pid=7, seq=6, count=2)).first_offset == 6
    # a snapshot beyond the log end (log truncated after a crash) is discarded
    assert not ProducerStateManager(tmp_path).load_latest_snapshot(log_end_offset=3)
    assert not list(tmp_path.glob("*.snapshot"))
    # a damaged snapshot is discarded
    state.write_snapshot()
    p = next(tmp_path.glob("*.snapshot"))
    p.write_bytes(p.read_bytes()[:-3] + b"xyz")
    assert not ProducerStateManager(tmp_path).load_latest_snapshot(log_end_offset=100)


def test_expiry_keeps_producers_with_open_transactions(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(header(pid=1), 0, now_ms=1000)
    h = records.parse_header(records.build_batch([(None, b"v", [])], timestamp_ms=1, producer_id=2,
                                                 producer_epoch=0, base_sequence=0, transactional=True))
    state.update(h, 1, now_ms=1000)
    assert state.expire(now_ms=1000 + 500, expiration_ms=1000) == []
    assert state.expire(now_ms=1000 + 1000, expiration_ms=1000) == [1]
    assert set(state.entries) == {2}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=30))
def test_retries_in_any_order_never_write_twice(tmp_path_factory, sends: list[tuple[int, int]]) -> None:
    """A producer sends batches in order; each may be retried (resent) any number of times
    right after it was written. The log holds every batch once."""
    state = ProducerStateManager(tmp_path_factory.mktemp("ps"))
    log = Log(state)
    seq = 0
    written = 0
    for retries, count in sends:
        h = header(seq=seq, count=count)
        first, dup = log.append(h)
        assert not dup
        for _ in range(retries):
            assert log.append(h) == (first, True)
        seq += count
        written += count
    assert log.end == written

"""A partition refuses transaction markers from a zombie coordinator (issue 15, R14).

Under transaction protocol v1 a producer keeps its epoch across transactions, so a COMMIT marker
that a deposed coordinator sends late would close the producer's *next* transaction on the
partition (committing its first records early). Kafka refuses a marker whose coordinator epoch
is older than the last marker's of that producer there (TRANSACTION_COORDINATOR_FENCED); so does
``Partition.append_marker``, and the coordinator epoch survives a restart: it is read back from
the markers in the log when the producer state is rebuilt.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.broker.partitions.partition import Partition
from oncelog.protocol import records
from oncelog.protocol.errors import InvalidProducerEpoch, TransactionCoordinatorFenced
from oncelog.storage.config import LogConfig
from oncelog.types import TopicPartition
from appends import completed

TP = TopicPartition("t", 0)
PID = 4000


def _txn_batch(seq: int, epoch: int = 0) -> bytes:
    return records.build_batch([(None, b"v%d" % seq, ())], producer_id=PID, producer_epoch=epoch,
                               base_sequence=seq, transactional=True, timestamp_ms=1)


def _append(part: Partition, seq: int, epoch: int = 0) -> int:
    batch = _txn_batch(seq, epoch)
    return completed(part.append_validated(batch, records.parse_header(batch), 1)).base_offset


def test_marker_from_an_older_coordinator_epoch_is_refused_even_after_a_restart(tmp_path: Path) -> None:
    part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
    _append(part, 0)
    assert completed(part.append_marker(PID, 0, True, 7, 2)) is not None  # coordinator epoch 7 commits
    _append(part, 1)  # the producer's next transaction, same producer epoch (TV1)
    with pytest.raises(TransactionCoordinatorFenced):
        completed(part.append_marker(PID, 0, True, 6, 3))  # a zombie coordinator's late COMMIT
    assert part.last_stable_offset == 2  # the open transaction still holds the LSO
    with pytest.raises(InvalidProducerEpoch):
        completed(part.append_marker(PID, -1, False, 8, 3))
    part.close()

    part = Partition.recover(TP, part.log.__class__.open(tmp_path / "t-0", LogConfig(), 4), tmp_path / "t-0", LogConfig())
    assert part.producers.entries[PID].coordinator_epoch == 7
    with pytest.raises(TransactionCoordinatorFenced):
        completed(part.append_marker(PID, 0, True, 6, 5))
    assert completed(part.append_marker(PID, 0, False, 7, 5)) is not None  # the current coordinator aborts it
    assert part.last_stable_offset == part.high_watermark
    assert [a.producer_id for a in part.aborted.collect(0, part.high_watermark)] == [PID]
    part.close()


def test_recovery_from_the_whole_log_reads_the_coordinator_epoch_of_markers(tmp_path: Path) -> None:
    part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 1)
    _append(part, 0)
    completed(part.append_marker(PID, 0, True, 3, 2))
    _append(part, 1)
    part.log.close()  # no snapshot: the state is rebuilt from the log alone
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    part = Partition.open(TP, tmp_path / "t-0", LogConfig(), 3)
    assert part.producers.entries[PID].coordinator_epoch == 3
    with pytest.raises(TransactionCoordinatorFenced):
        completed(part.append_marker(PID, 0, True, 2, 4))
    part.close()

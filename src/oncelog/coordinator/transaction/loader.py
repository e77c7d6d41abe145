"""Replaying ``__transaction_state`` batches into a shard: the one path from log bytes to state,
used when a partition loads and by the tests that check replay = live.

Bad input never stops a load (R22): a record that does not decode, a batch whose records do not
parse or decompress, and a control batch (a marker has no place in the transaction log) are
skipped and reported to the partition's ``SkipReport`` with their offset.
"""

from __future__ import annotations

from oncelog.coordinator.load_report import SkipReport, batch_records
from oncelog.coordinator.transaction import log as txnlog
from oncelog.coordinator.transaction.shard import TransactionShard
from oncelog.protocol import records


def replay_batch(shard: TransactionShard, header: records.BatchHeader, data: bytes, now: int, report: SkipReport) -> int:
    """Apply one batch of the partition's log; returns the records applied. Never raises for bad data."""
    del now  # the transaction log's records carry their own times
    if header.is_control:
        report.skip(header.base_offset, "control batch", "a transaction marker has no place in the transaction log")
        return 0
    recs = batch_records(header, data, report)
    applied = 0
    for rec in recs:
        try:
            shard.replay_bytes(rec.key, rec.value)
        except txnlog.TxnLogFormatError as exc:
            report.skip(rec.offset, "record", exc)
            continue
        applied += 1
    return applied

"""Replaying ``__consumer_offsets`` batches into a shard: the one path from log bytes to state,
used when a partition loads on start and by the tests that check replay = live.

A control batch is a transaction marker: ``GroupShard.replay_marker`` settles that producer's
pending offsets. A data batch's records are decoded (records.py) and replayed one by one, with the
batch's producer id, epoch and transactional flag.

Bad input never stops a load (R22): a marker or a batch that does not parse or decompress, a
record without a key or that does not decode, and a record whose replay raises are skipped and
reported to the partition's ``SkipReport`` (one line per skip with topic-partition and offset,
then a summary), so one bad record cannot keep every group of the partition offline.
"""

from __future__ import annotations

import logging

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.load_report import SkipReport, batch_records
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError
from oncelog.internal_topics import OFFSETS_TOPIC

log = logging.getLogger(__name__)



def new_report(partition: int) -> SkipReport:
    """The report of one ``__consumer_offsets`` partition's load (``finish`` it at the end)."""
    return SkipReport(f"{OFFSETS_TOPIC}-{partition}", log)


def replay_batch(shard: GroupShard, header: records.BatchHeader, data: bytes, now: int,
                 report: SkipReport | None = None) -> int:
    """Apply one batch (its bytes, base offset final). Returns the number of records applied.
    Never raises for bad data: skips go to ``report`` (default: a fresh one, finished here)."""
    own = report is None
    report = report or new_report(shard.partition)
    try:
        return _replay(shard, header, data, now, report)
    finally:
        if own:
            report.finish()


def _replay(shard: GroupShard, header: records.BatchHeader, data: bytes, now: int, report: SkipReport) -> int:
    if header.is_control:
        try:
            marker = records.read_control_marker(data)
        except KafkaError as exc:
            report.skip(header.base_offset, "control batch", exc)
            return 0
        shard.replay_marker(header.producer_id, header.producer_epoch, marker.commit)
        return 1
    recs = batch_records(header, data, report)
    applied = 0
    for r in recs:
        if r.key is None:
            report.skip(r.offset, "record", "it has no key")
            continue
        try:
            key = rec.decode_key(r.key)
            value = rec.decode_value(key, r.value)
        except rec.RecordFormatError as exc:
            report.skip(r.offset, "record", exc)
            continue
        try:
            shard.replay(
                key, value, record_offset=r.offset, now=now, producer_id=header.producer_id,
                producer_epoch=header.producer_epoch, transactional=header.is_transactional,
            )
        except Exception as exc:  # the load boundary: a replay that raises is a bug, not a reason to stay offline
            report.skip(r.offset, "record", f"bug: its replay raised {type(exc).__name__}: {exc}", exc_info=True)
            continue
        applied += 1
    return applied

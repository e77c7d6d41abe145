"""Replaying ``__consumer_offsets`` batches into a shard: the one path from log bytes to state,
used when a partition loads on start and by the tests that check replay = live.

A control batch is a transaction marker: ``GroupShard.replay_marker`` settles that producer's
pending offsets. A data batch's records are decoded (records.py) and replayed one by one, with the
batch's producer id, epoch and transactional flag. A record that does not decode is logged and
skipped, so one bad record cannot keep every group of the partition offline.
"""

from __future__ import annotations

import logging

from oncelog.coordinator.group import records as rec
from oncelog.coordinator.group.shard import GroupShard
from oncelog.protocol import records
from oncelog.protocol.errors import KafkaError

log = logging.getLogger(__name__)


def replay_batch(shard: GroupShard, header: records.BatchHeader, data: bytes, now: int) -> int:
    """Apply one batch (its bytes, base offset final). Returns the number of records applied."""
    if header.is_control:
        try:
            marker = records.read_control_marker(data)
        except KafkaError as exc:
            log.error("__consumer_offsets-%d: control batch at %d unreadable, skipped: %s", shard.partition, header.base_offset, exc)
            return 0
        shard.replay_marker(header.producer_id, header.producer_epoch, marker.commit)
        return 1
    applied = 0
    try:
        recs = list(records.iter_records(data))
    except KafkaError as exc:
        log.error("__consumer_offsets-%d: batch at %d unreadable, skipped: %s", shard.partition, header.base_offset, exc)
        return 0
    for r in recs:
        if r.key is None:
            log.error("__consumer_offsets-%d: record at %d has no key, skipped", shard.partition, r.offset)
            continue
        try:
            key = rec.decode_key(r.key)
            value = rec.decode_value(key, r.value)
        except rec.RecordFormatError as exc:
            log.error("__consumer_offsets-%d: record at %d skipped: %s", shard.partition, r.offset, exc)
            continue
        shard.replay(
            key, value, record_offset=r.offset, now=now, producer_id=header.producer_id,
            producer_epoch=header.producer_epoch, transactional=header.is_transactional,
        )
        applied += 1
    return applied

"""ListOffsets (2): offsets by timestamp.

Special timestamps: -2 earliest (the log start offset), -1 latest (the high watermark, or the
last stable offset for read_committed requests), -3 the record with the largest timestamp
(KIP-734; the first on ties, found inside its batch), and, as Kafka without tiered storage
answers them, -4 EARLIEST_LOCAL (v8+, KIP-405: the log start offset, all data is local), -5
LATEST_TIERED (v9+) and -6 EARLIEST_PENDING_UPLOAD (v11+): offset -1 with leader epoch -1,
nothing is tiered. Any other timestamp: the first record whose timestamp >= it, or -1 when
none does. v10 adds the request's timeout (nothing here waits).

Leader epochs (KIP-320, v4+): ``current_leader_epoch`` older than the leader's answers
FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (-1: not checked). The answer's leader epoch is
Kafka's: the leader's current epoch for -1 (latest), the epoch of the batch holding the offset
otherwise (embedded: always 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.storage.leader_epochs import UNDEFINED_EPOCH, check_current_epoch

if TYPE_CHECKING:
    from oncelog.broker.partitions.partition import Partition

API_KEY = apis.LIST_OFFSETS
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6


def _lookup(part: "Partition", ts: int, read_committed: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) as Kafka answers them: latest carries the leader's
    current epoch, the others the epoch of the batch holding the offset found."""
    plog = part.log
    if ts == LATEST:
        return -1, part.last_stable_offset if read_committed else part.high_watermark, plog.leader_epoch
    if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1
    if ts in (EARLIEST, EARLIEST_LOCAL):
        start = part.log_start_offset
        return -1, start, plog.epoch_at(start)
    if ts == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
        if found is None:
            return -1, -1, -1
        found_ts, offset = found
    else:
        found = plog.offset_for_timestamp(ts)
        if found is None:
            return -1, -1, -1
        offset, found_ts = found
    return found_ts, offset, plog.epoch_at(offset)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    read_committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    g = _acl.gate(broker, client, API_KEY)
    for t in req.topics:
        results = []
        denied = _acl.denied(g, "topic", t.name)  # ACLs (issue 18): DESCRIBE on the topic
        for p in t.partitions:
            try:
                if denied is not None:
                    _acl.refuse(denied, client.principal, f"DESCRIBE topic {t.name}")
                part = broker.replicas.partition(t.name, p.partition_index)
                check_current_epoch(f"{t.name}-{p.partition_index}",
                                    getattr(p, "current_leader_epoch", UNDEFINED_EPOCH), part.log.leader_epoch)
                ts, offset, epoch = _lookup(part, p.timestamp, read_committed)
                results.append(
                    m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=ErrorCode.none, timestamp=ts, offset=offset,
                        leader_epoch=epoch,
                    )
                )
            except KafkaError as exc:
                results.append(
                    m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=exc.code, timestamp=-1, offset=-1, leader_epoch=-1
                    )
                )
        topics.append(m.ListOffsetsTopicResponse(name=t.name, partitions=tuple(results)))
    return m.ListOffsetsResponse(topics=tuple(topics))

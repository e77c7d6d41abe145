"""ListOffsets (2): offsets by timestamp.

Special timestamps: -2 earliest (the log start offset), -1 latest (the high watermark, or the
last stable offset for read_committed requests), -3 the batch holding the largest timestamp
(KIP-734). Any other timestamp: the first offset whose batch has a timestamp >= it, or -1 when
none does.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.LIST_OFFSETS
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def _lookup(part: Any, ts: int, read_committed: bool) -> tuple[int, int]:
    if ts == EARLIEST:
        return -1, part.log_start_offset
    if ts == LATEST:
        return -1, part.last_stable_offset if read_committed else part.high_watermark
    if ts == MAX_TIMESTAMP:
        found = part.log.max_timestamp_offset()
        return found if found is not None else (-1, -1)
    found = part.log.offset_for_timestamp(ts)
    if found is None:
        return -1, -1
    offset, found_ts = found
    return found_ts, offset


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    read_committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    for t in req.topics:
        results = []
        for p in t.partitions:
            try:
                part = broker.replicas.partition(t.name, p.partition_index)
                ts, offset = _lookup(part, p.timestamp, read_committed)
                results.append(
                    m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=ErrorCode.none, timestamp=ts, offset=offset, leader_epoch=0
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

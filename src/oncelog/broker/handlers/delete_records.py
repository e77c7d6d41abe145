"""DeleteRecords (21): advance a partition's log start offset (offset -1 = the high watermark).

Segments wholly below the new start are deleted; consumers asking below it get
OFFSET_OUT_OF_RANGE. An offset above the high watermark is OFFSET_OUT_OF_RANGE. Internal topics
are refused (INVALID_TOPIC_EXCEPTION), as in Kafka: cutting ``__consumer_offsets`` would lose
committed offsets and cutting ``__transaction_state`` would leave transactions nobody finishes.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidTopic, KafkaError, OffsetOutOfRange
from oncelog.protocol.framing import Request

API_KEY = apis.DELETE_RECORDS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    topics = []
    g = _acl.gate(broker, client, API_KEY)
    for t in req.topics:
        results = []
        denied = _acl.denied(g, "topic", t.name)  # ACLs (issue 18): DELETE on the topic
        for p in t.partitions:
            try:
                if denied is not None:
                    _acl.refuse(denied, client.principal, f"DELETE records of {t.name}")
                if broker.replicas.topic(t.name).internal:
                    raise InvalidTopic(f"cannot delete records of internal topic {t.name}")
                part = broker.replicas.partition(t.name, p.partition_index)
                offset = part.high_watermark if p.offset == -1 else p.offset
                if not 0 <= offset <= part.high_watermark:
                    raise OffsetOutOfRange(
                        f"delete-records offset {offset} of {t.name}-{p.partition_index} is above the high watermark {part.high_watermark}"
                    )
                part.delete_records(offset)
                results.append(
                    m.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=part.log_start_offset, error_code=ErrorCode.none
                    )
                )
            except KafkaError as exc:
                results.append(
                    m.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=exc.code)
                )
        topics.append(m.DeleteRecordsTopicResult(name=t.name, partitions=tuple(results)))
    return m.DeleteRecordsResponse(topics=tuple(topics))

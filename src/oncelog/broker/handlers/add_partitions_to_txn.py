"""AddPartitionsToTxn (24): partitions join the producer's transaction (R12).

Per-partition answers: partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and, as in
Kafka, the others then get OPERATION_NOT_ATTEMPTED (nothing is added); a coordinator error
(fenced, concurrent transition, unknown producer id) applies to every partition.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers._txn import error_code
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.types import TopicPartition
from oncelog.protocol.framing import Request

API_KEY = apis.ADD_PARTITIONS_TO_TXN


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    wanted = [TopicPartition(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    codes: dict[TopicPartition, ErrorCode] = {}
    unknown = {tp for tp in wanted if not broker.replicas.exists(tp)}
    if unknown:
        codes = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted for tp in wanted}
    else:
        try:
            await broker.transactions.add_partitions(
                req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, set(wanted)
            )
            codes = {tp: ErrorCode.none for tp in wanted}
        except KafkaError as exc:
            code = error_code(exc, API_KEY, request.api_version)
            codes = {tp: code for tp in wanted}
    by_topic: dict[str, list[Any]] = {}
    for tp in wanted:
        by_topic.setdefault(tp.topic, []).append(
            m.AddPartitionsToTxnPartitionResult(partition_index=tp.partition, partition_error_code=codes[tp])
        )
    return m.AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=tuple(
            m.AddPartitionsToTxnTopicResult(name=t, results_by_partition=tuple(r)) for t, r in by_topic.items()
        )
    )

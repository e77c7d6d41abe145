"""Produce (0): append one record batch per partition, whole.

Each partition's batch is validated at the header level and appended as bytes (partition.py);
errors are per partition. acks=0 gets no response; if such a request fails, the connection is
closed instead, as Kafka does, so the producer notices. acks=1 and acks=-1 are equivalent with a
single replica: the batch is in the log (and in every in-sync replica, i.e. this one) before the
answer goes out (R2).

Transactional batches (R12) must come with the request's transactional.id and go only to
partitions their transaction has added (the coordinator's ``verify_produce``, as Kafka 3.6+'s
KIP-890 verification); otherwise INVALID_TXN_STATE, and nothing is written.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol import records
from oncelog.protocol.errors import CorruptMessage, ErrorCode, InvalidRequest, InvalidRequiredAcks, KafkaError
from oncelog.types import TopicPartition

API_KEY = apis.PRODUCE


async def handle(broker: Any, request: Any) -> Any:
    from oncelog.broker.dispatch import CloseConnection

    req = request.body
    m = Builder(API_KEY, request.api_version)
    now = broker.clock.now_ms()
    acks = req.acks
    failed: list[str] = []
    topics = []
    for t in req.topic_data:
        results = []
        for p in t.partition_data:
            try:
                if acks not in (-1, 0, 1):
                    raise InvalidRequiredAcks(f"acks={acks} (must be -1, 0 or 1)")
                part = broker.replicas.partition(t.name, p.index)
                if not p.records:
                    raise CorruptMessage(f"produce to {t.name}-{p.index} carries no record batch")
                _check_transactional(broker, req.transactional_id, p.records, TopicPartition(t.name, p.index))
                res = part.append(p.records, now)
                results.append(
                    m.PartitionProduceResponse(
                        index=p.index,
                        error_code=ErrorCode.none,
                        base_offset=res.base_offset,
                        log_append_time=None,
                        log_start_offset=res.log_start_offset,
                        record_errors=(),
                        error_message=None,
                    )
                )
            except KafkaError as exc:
                failed.append(f"{t.name}-{p.index}: {exc.code.name}: {exc}")
                results.append(
                    m.PartitionProduceResponse(
                        index=p.index,
                        error_code=exc.code,
                        base_offset=-1,
                        log_append_time=None,
                        log_start_offset=-1,
                        record_errors=(),
                        error_message=str(exc),
                    )
                )
        topics.append(m.TopicProduceResponse(name=t.name, partition_responses=tuple(results)))
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed: " + "; ".join(failed))
        return None
    return m.ProduceResponse(responses=tuple(topics))


def _check_transactional(broker: Any, transactional_id: str | None, batch: bytes, tp: TopicPartition) -> None:
    h = records.parse_header(batch)
    if h.is_transactional:
        if transactional_id is None:
            raise InvalidRequest(f"transactional batch for {tp} in a produce request without a transactional id")
        broker.transactions.verify_produce(transactional_id, h.producer_id, h.producer_epoch, tp)
    elif transactional_id is not None:
        raise InvalidRequest(f"non-transactional batch for {tp} in a transactional produce request")

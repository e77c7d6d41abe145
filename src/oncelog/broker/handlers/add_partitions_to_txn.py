"""AddPartitionsToTxn (24): partitions join the producer's transaction (R12).

Per-partition answers: partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and, as in
Kafka, the others then get OPERATION_NOT_ATTEMPTED (nothing is added); a coordinator error
(fenced, concurrent transition, unknown producer id) applies to every partition.

v4 (KIP-890, sent by brokers: broker/partitions/txn_verifier.py) carries several transactions, each either
added as above or, with ``verify_only``, only checked: each partition answers NONE when it is
in the producer's ongoing transaction, else the coordinator's refusal (INVALID_TXN_STATE,
PRODUCER_FENCED, NOT_COORDINATOR…); nothing is written. Without ``verify_only`` it is a
leader's add for a transactions-version-2 client (Produce v12+, TxnOffsetCommit v5+, KIP-890
part 2), as Kafka 4's leaders send it: each partition joins the transaction
(``TransactionCoordinator.add_implicitly``). v5 only allows TRANSACTION_ABORTABLE, not sent here.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers._txn import error_code
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import (ConcurrentTransactions, ErrorCode, InvalidProducerEpoch, KafkaError,
                                     ProducerFenced)
from oncelog.types import TopicPartition

from oncelog.protocol.framing import Request
from oncelog.internal_topics import OFFSETS_TOPIC

API_KEY = apis.ADD_PARTITIONS_TO_TXN


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    g = _acl.gate(broker, client, API_KEY)
    if request.api_version >= 4:
        # ACLs (issue 18): v4+ is sent by brokers: CLUSTER_ACTION on the cluster, which trusts them
        # with every transaction of the request (no per-id check)
        _acl.check(g, "broker")
        results = []
        for txn in req.transactions:
            wanted = [TopicPartition(t.name, p) for t in txn.topics for p in t.partitions]
            if txn.verify_only:
                codes = _verify(broker, txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
            else:  # a leader's add for a transactions-version-2 produce (or offsets) of the client
                codes = await _add_implicitly(broker, txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
            results.append(m.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                      topic_results=_topic_results(m, wanted, codes)))
        return m.AddPartitionsToTxnResponse(error_code=ErrorCode.none, results_by_transaction=tuple(results))
    wanted = [TopicPartition(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    refused = _authorize(g, req.v3_and_below_transactional_id, wanted)
    if refused is not None:
        return m.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(m, wanted, refused))
    codes = await _add(broker, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                       req.v3_and_below_producer_epoch, wanted, request.api_version)
    return m.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(m, wanted, codes))


async def _add(broker: BrokerContext, tid: str, pid: int, epoch: int, wanted: list[TopicPartition],
               version: int) -> dict[TopicPartition, ErrorCode]:
    unknown = {tp for tp in wanted if not broker.replicas.exists(tp)}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in wanted}
    try:
        await broker.transactions.add_partitions(tid, pid, epoch, set(wanted))
    except KafkaError as exc:
        code = error_code(exc, API_KEY, version)
        return {tp: code for tp in wanted}
    return {tp: ErrorCode.none for tp in wanted}


async def _add_implicitly(broker: BrokerContext, tid: str, pid: int, epoch: int,
                          wanted: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    codes = {}
    for tp in wanted:
        older = ProducerFenced if tp.topic == OFFSETS_TOPIC else InvalidProducerEpoch
        try:
            await broker.transactions.add_implicitly(tid, pid, epoch, tp, older=older, retriable=ConcurrentTransactions)
            codes[tp] = ErrorCode.none
        except KafkaError as exc:
            codes[tp] = exc.code
    return codes


def _authorize(g: _acl.Gate | None, tid: str, wanted: list[TopicPartition]) -> dict[TopicPartition, ErrorCode] | None:
    """ACLs (issue 18, acl/rules.py): WRITE on the transactional id (else every partition
    answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (refused partitions answer
    TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED, as Kafka). None: allowed."""
    if g is None:
        return None
    code = g.denied("transactional_id", tid)
    if code is not None:
        return {tp: code for tp in wanted}
    denied = {t for t in {tp.topic for tp in wanted} if not g.allowed("topic", t)}
    if not denied:
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp.topic in denied else ErrorCode.operation_not_attempted
            for tp in wanted}


def _verify(broker: BrokerContext, tid: str, pid: int, epoch: int,
            wanted: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    codes = {}
    for tp in wanted:
        try:
            broker.transactions.verify_produce(tid, pid, epoch, tp)
            codes[tp] = ErrorCode.none
        except KafkaError as exc:
            codes[tp] = exc.code
    return codes


def _topic_results(m: Builder, wanted: list[TopicPartition], codes: dict[TopicPartition, ErrorCode]) -> tuple:
    by_topic: dict[str, list[Any]] = {}
    for tp in wanted:
        by_topic.setdefault(tp.topic, []).append(
            m.AddPartitionsToTxnPartitionResult(partition_index=tp.partition, partition_error_code=codes[tp])
        )
    return tuple(m.AddPartitionsToTxnTopicResult(name=t, results_by_partition=tuple(r)) for t, r in by_topic.items())

"""DescribeTransactions (65): the state of each transactional id this broker coordinates
(KIP-664): Kafka's state name, timeout, start time, producer id and epoch, and its partitions
by topic. Per id: NOT_COORDINATOR when another broker coordinates it (ask FindCoordinator,
key type 1), COORDINATOR_LOAD_IN_PROGRESS while its partition of ``__transaction_state`` loads,
TRANSACTIONAL_ID_NOT_FOUND when the coordinator has no record of it.

**Difference from Kafka:** a transaction never started (Empty after InitProducerId) has start
time -1 in Kafka's answer; kio, the wire library of this broker's own tools, refuses negative
timestamps, so such a start time is answered as 0 (the epoch), as are error entries (Kafka's
schema default). Tools read "started" from the state, not from the start time."""

from __future__ import annotations

import datetime
from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.coordinator.transaction.listing import partitions_by_topic
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DESCRIBE_TRANSACTIONS
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


def _time(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=max(ms, 0))


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    m = Builder(API_KEY, request.api_version)
    out = []
    g = _acl.gate(broker, client, API_KEY)
    for tid in request.body.transactional_ids:
        empty = dict(transactional_id=tid, transaction_state="", transaction_timeout=datetime.timedelta(0),
                     transaction_start_time=_EPOCH, producer_id=-1, producer_epoch=-1, topics=())
        try:
            _acl.check(g, "transactional_id", tid)  # ACLs (issue 18): DESCRIBE on the transactional id
            meta = broker.transactions.shard_of(tid).txns.get(tid)
        except KafkaError as exc:
            out.append(m.TransactionState(error_code=exc.code, **empty))
            continue
        if meta is None:
            out.append(m.TransactionState(error_code=ErrorCode.transactional_id_not_found, **empty))
            continue
        out.append(m.TransactionState(
            error_code=ErrorCode.none, transactional_id=tid, transaction_state=meta.state.kafka_name,
            transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
            transaction_start_time=_time(meta.start_ms), producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple(m.TopicData(topic=t, partitions=tuple(ps)) for t, ps in partitions_by_topic(meta).items()
                         if g is None or g.allowed("topic", t)),
        ))
    return m.DescribeTransactionsResponse(transaction_states=tuple(out))

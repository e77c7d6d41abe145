"""ListTransactions (66): the transactional ids this broker coordinates, with their producer id
and state (KIP-664), filtered by state names, producer ids, (v1) a minimum duration and (v2) a
transactional id pattern (coordinator/transaction/listing.py). State names no state has are
listed in ``unknown_state_filters``. While a partition of ``__transaction_state`` is still
loading, the answer is COORDINATOR_LOAD_IN_PROGRESS with the ids loaded so far, as Kafka's.
A tool lists every broker and merges (``oncelog transactions list``)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.coordinator.transaction.listing import ListFilter, listed
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.LIST_TRANSACTIONS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    flt = ListFilter(states=tuple(req.state_filters), producer_ids=tuple(req.producer_id_filters),
                     min_duration_ms=getattr(req, "duration_filter", -1),
                     pattern=getattr(req, "transactional_id_pattern", None))
    runtime = broker.transactions.runtime
    g = _acl.gate(broker, client, API_KEY)
    try:
        txns = listed(broker.transactions.txns.values(), flt, broker.clock.now_ms())
    except KafkaError as exc:
        return m.ListTransactionsResponse(error_code=exc.code, unknown_state_filters=(), transaction_states=())
    return m.ListTransactionsResponse(
        error_code=ErrorCode.coordinator_load_in_progress if runtime.loading else ErrorCode.none,
        unknown_state_filters=flt.unknown_states(),
        transaction_states=tuple(
            m.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                               transaction_state=t.state.kafka_name)
            for t in txns
            if g is None or g.allowed("transactional_id", t.transactional_id)  # ACLs (issue 18): DESCRIBE
        ),
    )

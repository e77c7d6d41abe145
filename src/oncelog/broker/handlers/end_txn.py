"""EndTxn (26): commit or abort the producer's transaction (R14, R19)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers._txn import error_code
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.END_TXN


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    try:
        _acl.check(_acl.gate(broker, client, API_KEY), "transactional_id", req.transactional_id)  # issue 18
        await broker.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed))
    except KafkaError as exc:
        return m.EndTxnResponse(error_code=error_code(exc, API_KEY, request.api_version))
    return m.EndTxnResponse(error_code=ErrorCode.none)

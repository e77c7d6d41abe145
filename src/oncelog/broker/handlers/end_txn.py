"""EndTxn (26): commit or abort the producer's transaction (R14, R19)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.handlers._txn import error_code
from oncelog.broker.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError

API_KEY = apis.END_TXN


async def handle(broker: Any, request: Any) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    try:
        broker.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed))
    except KafkaError as exc:
        return m.EndTxnResponse(error_code=error_code(exc, API_KEY, request.api_version))
    return m.EndTxnResponse(error_code=ErrorCode.none)

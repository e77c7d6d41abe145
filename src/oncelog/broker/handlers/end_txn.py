"""EndTxn (26): commit or abort the producer's transaction (R14, R19).

v5 is transactions version 2 (KIP-890 part 2): the end bumps the producer epoch (or, at the last
epoch, moves to a new producer id) and the answer carries the producer id and epoch the client
goes on with; a late EndTxn of the previous transaction is fenced (coordinator/transaction/rules.py).
"""

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
    v2 = request.api_version >= 5
    try:
        _acl.check(_acl.gate(broker, client, API_KEY), "transactional_id", req.transactional_id)  # issue 18
        pid, epoch = await broker.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                       bool(req.committed), v2=v2)
    except KafkaError as exc:
        return m.EndTxnResponse(error_code=error_code(exc, API_KEY, request.api_version))
    if v2:
        return m.EndTxnResponse(error_code=ErrorCode.none, producer_id=pid, producer_epoch=epoch)
    return m.EndTxnResponse(error_code=ErrorCode.none)

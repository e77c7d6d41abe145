"""AddOffsetsToTxn (25): the group's ``__consumer_offsets`` partition joins the transaction, so
the offsets the producer then sends with TxnOffsetCommit commit or abort with it (R12, R13)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers._txn import error_code
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.ADD_OFFSETS_TO_TXN


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    try:
        g = _acl.gate(broker, client, API_KEY)  # ACLs (issue 18): WRITE on the id, READ on the group
        _acl.check(g, "transactional_id", req.transactional_id)
        _acl.check(g, "group", req.group_id)
        await broker.transactions.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch, req.group_id)
    except KafkaError as exc:
        return m.AddOffsetsToTxnResponse(error_code=error_code(exc, API_KEY, request.api_version))
    return m.AddOffsetsToTxnResponse(error_code=ErrorCode.none)

"""FindCoordinator (10): which broker coordinates a group (key type 0) or a transactional.id
(key type 1) (R10).

The coordinator of a key is the leader of partition ``abs(hash(key)) % N`` of the internal topic
(``__consumer_offsets`` / ``__transaction_state``); with one broker that leader is always this
broker, so the answer is this broker whenever the key is valid. In cluster mode (issue 15) the
coordinators do not run yet: every valid key gets COORDINATOR_NOT_AVAILABLE. ``RESOLVERS`` maps each key type
to the check of its keys; adding a key type is one entry. v4+ asks for many keys at once.
"""

from __future__ import annotations

from typing import Any, Callable

from oncelog.broker.context import BrokerContext, Client
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol.errors import CoordinatorNotAvailable, ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request

API_KEY = apis.FIND_COORDINATOR
GROUP, TRANSACTION = 0, 1


def _group_key(broker: BrokerContext, key: str) -> None:
    validate_group_id(key)


def _transaction_key(broker: BrokerContext, key: str) -> None:
    if not key:
        raise InvalidRequest("transactional id must not be empty")


#: key type -> check of a key (raises the KafkaError to answer; returns: this broker coordinates it)
RESOLVERS: dict[int, Callable[[BrokerContext, str], None]] = {GROUP: _group_key, TRANSACTION: _transaction_key}


def _resolve(broker: BrokerContext, key_type: int, key: str) -> ErrorCode:
    check = RESOLVERS.get(key_type)
    if check is None:
        return ErrorCode.invalid_request
    try:
        check(broker, key)
    except KafkaError as exc:
        return exc.code
    if broker.cluster is not None:
        return ErrorCode.coordinator_not_available  # no coordinators in cluster mode yet (docs/CLUSTER.md)
    return ErrorCode.none


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    node, host, port = broker.node_id, broker.advertised_host, broker.advertised_port
    key_type = getattr(req, "key_type", GROUP)
    if request.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            code = _resolve(broker, key_type, key)
            ok = code == ErrorCode.none
            coordinators.append(
                m.Coordinator(
                    key=key, node_id=node if ok else -1, host=host if ok else "", port=port if ok else -1,
                    error_code=code, error_message=None,
                )
            )
        return m.FindCoordinatorResponse(coordinators=tuple(coordinators))
    code = _resolve(broker, key_type, req.key)
    ok = code == ErrorCode.none
    return m.FindCoordinatorResponse(
        error_code=code, error_message=None, node_id=node if ok else -1, host=host if ok else "", port=port if ok else -1
    )

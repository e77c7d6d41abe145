"""FindCoordinator (10): which broker coordinates a group (key type 0) or a transactional.id
(key type 1) (R10).

The coordinator of a key is the leader of partition ``abs(hash(key)) % N`` of the internal topic
(``__consumer_offsets`` / ``__transaction_state``); with one broker that leader is always this
broker, so the answer is this broker whenever the key is valid. In cluster mode (issue 15) it
is the live broker the store names as that partition's leader (from this broker's latest view;
COORDINATOR_NOT_AVAILABLE while the partition has no live leader). The named broker may still
be loading the partition (it answers COORDINATOR_LOAD_IN_PROGRESS) or may have lost it since
(NOT_COORDINATOR): clients ask again, as with Kafka. ``RESOLVERS`` maps each key type to the
check of its keys; adding a key type is one entry. v4+ asks for many keys at once; v5 only
allows TRANSACTION_ABORTABLE (never sent here); v6 adds the share coordinator's key type 2
(KIP-932), which this broker does not serve: INVALID_REQUEST, as Kafka answers with share groups
disabled.
"""

from __future__ import annotations

from typing import Any, Callable

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol.errors import CoordinatorNotAvailable, ErrorCode, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request
from oncelog.types import TopicPartition
from oncelog.internal_topics import OFFSETS_TOPIC, TXN_TOPIC

API_KEY = apis.FIND_COORDINATOR
GROUP, TRANSACTION = 0, 1


def _group_key(broker: BrokerContext, key: str) -> None:
    validate_group_id(key)


def _transaction_key(broker: BrokerContext, key: str) -> None:
    if not key:
        raise InvalidRequest("transactional id must not be empty")


#: key type -> check of a key (raises the KafkaError to answer; returns: this broker coordinates it)
RESOLVERS: dict[int, Callable[[BrokerContext, str], None]] = {GROUP: _group_key, TRANSACTION: _transaction_key}


#: key type -> the internal topic whose partition leader coordinates the key
TOPICS = {GROUP: OFFSETS_TOPIC, TRANSACTION: TXN_TOPIC}


#: key type -> the role of its ACL check (issue 18, acl/rules.py): DESCRIBE on the group / transactional id
ROLES = {GROUP: "group", TRANSACTION: "transactional_id"}


def _resolve(broker: BrokerContext, key_type: int, key: str, g: _acl.Gate | None) -> tuple[ErrorCode, int, str, int]:
    """(error, node id, host, port) of the coordinator of ``key``."""
    check = RESOLVERS.get(key_type)
    if check is None:
        return ErrorCode.invalid_request, -1, "", -1
    try:
        _acl.check(g, ROLES[key_type], key)
        check(broker, key)
    except KafkaError as exc:
        return exc.code, -1, "", -1
    if key_type == GROUP:
        partition = broker.groups.partition_for(key)
    else:
        partition = broker.transactions.partition_of(key)
    leader, _ = broker.metadata.leader(TopicPartition(TOPICS[key_type], partition))
    node = broker.metadata.node(leader, broker.listener_name)
    if node is None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    return ErrorCode.none, node.node_id, node.host, node.port


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    key_type = getattr(req, "key_type", GROUP)
    g = _acl.gate(broker, client, API_KEY)
    if request.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            code, node, host, port = _resolve(broker, key_type, key, g)
            coordinators.append(
                m.Coordinator(key=key, node_id=node, host=host, port=port, error_code=code, error_message=None)
            )
        return m.FindCoordinatorResponse(coordinators=tuple(coordinators))
    code, node, host, port = _resolve(broker, key_type, req.key, g)
    return m.FindCoordinatorResponse(error_code=code, error_message=None, node_id=node, host=host, port=port)

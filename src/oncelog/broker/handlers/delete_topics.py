"""DeleteTopics (20): delete topics by name (or, v6+, by topic id) with their logs.

Embedded, the replica manager removes the topic and its partition directories; in cluster mode
the store does (its rows and batches, one transaction) and every broker's next view closes the
partitions it led."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError, TopicDeletionDisabled, UnknownTopicId
from oncelog.protocol.framing import Request

if TYPE_CHECKING:  # kio's class of each version this handler serves (annotations only)
    from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
    from kio.schema.delete_topics.v2.request import DeleteTopicsRequest as DeleteTopicsRequestV2
    from kio.schema.delete_topics.v3.request import DeleteTopicsRequest as DeleteTopicsRequestV3
    from kio.schema.delete_topics.v4.request import DeleteTopicsRequest as DeleteTopicsRequestV4
    from kio.schema.delete_topics.v5.request import DeleteTopicsRequest as DeleteTopicsRequestV5
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsRequestV6
    DeleteTopicsRequest = (
        DeleteTopicsRequestV1 | DeleteTopicsRequestV2 | DeleteTopicsRequestV3 | DeleteTopicsRequestV4 |
        DeleteTopicsRequestV5 | DeleteTopicsRequestV6
    )

API_KEY = apis.DELETE_TOPICS
_ZERO = uuid.UUID(int=0)


def _requested(req: "DeleteTopicsRequest") -> list[tuple[str | None, uuid.UUID]]:
    if hasattr(req, "topic_names"):
        return [(n, _ZERO) for n in req.topic_names]
    return [(t.name, t.topic_id) for t in req.topics]


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    rm = broker.replicas
    results = []
    g = _acl.gate(broker, client, API_KEY)
    for name, topic_id in _requested(req):
        try:
            if not broker.config.delete_topic_enable:
                raise TopicDeletionDisabled("delete.topic.enable is false")
            if name is None:
                meta = rm.topic_by_id(topic_id)
                if meta is None:
                    raise UnknownTopicId(f"no topic has id {topic_id}")
                name = meta.name
            denied = _acl.denied(g, "topic", name)  # ACLs (issue 18): DELETE on the topic
            if denied is not None:
                _acl.refuse(denied, client.principal, f"DELETE topic {name}")
            meta = rm.topic(name)
            if meta.internal:
                raise InvalidRequest(f"internal topic {name} cannot be deleted")
            await broker.topics.delete(name)
            results.append(m.DeletableTopicResult(name=name, topic_id=meta.topic_id, error_code=ErrorCode.none))
        except KafkaError as exc:
            results.append(
                m.DeletableTopicResult(name=name, topic_id=topic_id, error_code=exc.code, error_message=str(exc))
            )
    return m.DeleteTopicsResponse(responses=tuple(results))


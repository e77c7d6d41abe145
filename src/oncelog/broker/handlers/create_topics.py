"""CreateTopics (19): create topics with a partition count and topic configs.

Per-topic errors: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR (only 1 replica exists), INVALID_CONFIG; manual replica assignments
are accepted only when they name this broker alone. ``validate_only`` checks without creating.
Every topic is validated completely (configs included) before anything is written, and the
request's topics are created together (topics.json written once). In cluster mode topics are
created in the store and given leaders by a rebalance (handlers/_cluster.py).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers import _cluster
from oncelog.broker.configuration import topic_config
from oncelog.protocol.messages import Builder
from oncelog.broker.partitions.replica_manager import NewTopic, TopicMeta
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidReplicationFactor, InvalidRequest, KafkaError
from oncelog.protocol.framing import Request

if TYPE_CHECKING:  # kio's class of each version this handler serves (annotations only)
    from kio.schema.create_topics.v2.request import CreatableTopic as CreatableTopicV2
    from kio.schema.create_topics.v3.request import CreatableTopic as CreatableTopicV3
    from kio.schema.create_topics.v4.request import CreatableTopic as CreatableTopicV4
    from kio.schema.create_topics.v5.request import CreatableTopic as CreatableTopicV5
    from kio.schema.create_topics.v6.request import CreatableTopic as CreatableTopicV6
    from kio.schema.create_topics.v7.request import CreatableTopic as CreatableTopicV7
    CreatableTopic = (
        CreatableTopicV2 | CreatableTopicV3 | CreatableTopicV4 | CreatableTopicV5 | CreatableTopicV6 |
        CreatableTopicV7
    )

API_KEY = apis.CREATE_TOPICS


def _new_topic(broker: BrokerContext, t: "CreatableTopic", seen: set[str]) -> NewTopic:
    """The topic a CreatableTopic asks for; raises for what only the request can tell."""
    if t.name in seen:
        raise InvalidRequest(f"topic {t.name!r} appears twice in the request")
    seen.add(t.name)
    num_partitions, rf = t.num_partitions, t.replication_factor
    if t.assignments:
        if num_partitions != -1 or rf != -1:
            raise InvalidRequest("both replica assignments and partitions/replication factor given")
        for a in t.assignments:
            if list(a.broker_ids) != [broker.node_id]:
                raise InvalidReplicationFactor(f"replica assignment {list(a.broker_ids)} names unknown brokers")
        num_partitions, rf = len(t.assignments), 1
    return NewTopic(t.name, num_partitions, rf, {c.name: c.value for c in t.configs})


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    seen: set[str] = set()
    outcome: list[TopicMeta | KafkaError] = []
    wanted: list[NewTopic] = []
    g = _acl.gate(broker, client, API_KEY)
    may_create_any = g is None or g.allowed("cluster")  # ACLs (issue 18): CREATE on the cluster or the topic
    for t in req.topics:
        try:
            if not may_create_any and not g.allowed("topic", t.name):  # type: ignore[union-attr]
                _acl.refuse(ErrorCode.topic_authorization_failed, client.principal, f"CREATE topic {t.name}")
            wanted.append(_new_topic(broker, t, seen))
            outcome.append(None)  # type: ignore[arg-type]  # filled below
        except KafkaError as exc:
            outcome.append(exc)
    created = iter(await _cluster.create_topics(broker, wanted, validate_only=bool(getattr(req, "validate_only", False))))
    outcome = [next(created) if o is None else o for o in outcome]
    results = []
    for t, result in zip(req.topics, outcome):
        if isinstance(result, KafkaError):
            results.append(
                m.CreatableTopicResult(
                    name=t.name,
                    topic_id=uuid.UUID(int=0),
                    error_code=result.code,
                    error_message=str(result),
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=(),
                )
            )
            continue
        described = ()
        config_error = _acl.denied(g, "configs", t.name) or ErrorCode.none  # DESCRIBE_CONFIGS to see them
        if m.has_class("CreatableTopicConfigs") and config_error == ErrorCode.none:  # v5+ describes the new topic's configs
            described = tuple(
                m.CreatableTopicConfigs(name=d.name, value=syn[0][1], read_only=False, config_source=int(syn[0][2]),
                                        is_sensitive=False)
                for d, syn in topic_config.describe(broker.config, result.configs, broker.replicas.dynamic.layered())
            )
        results.append(
            m.CreatableTopicResult(
                name=t.name,
                topic_id=result.topic_id,
                error_code=ErrorCode.none,
                error_message=None,
                num_partitions=result.num_partitions,
                replication_factor=1,
                configs=described,
                topic_config_error_code=config_error,
            )
        )
    return m.CreateTopicsResponse(topics=tuple(results))

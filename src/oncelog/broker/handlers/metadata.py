"""Metadata (3): brokers, cluster id, controller, and topics with their partitions.

Topics that do not exist are created when ``auto.create.topics.enable`` is on and the request
allows it (v4+ ``allow_auto_topic_creation``; always allowed before v4), with
``num.partitions`` partitions, as Kafka does. A null topic list means all topics; internal topics
are listed too (clients filter them). With one broker, every partition's leader, replica set
and ISR is this broker. In cluster mode (issue 15) the brokers are the live ones and each
partition's leader and leader epoch come from the broker's view of the store (at most one poll
old); topics are auto-created in the store.

ACLs (issue 18, acl/rules.py): a topic the principal may not DESCRIBE is left out of an
all-topics answer and answers TOPIC_AUTHORIZATION_FAILED when named; a missing topic is
auto-created only with CREATE on the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED).
Authorized operations (KIP-430): when asked, those allowed (every operation without an
authorizer; _acl.py); the cluster's are 0 without DESCRIBE on the cluster.

Metadata v10 and v11 carry a topic id next to each name, but Kafka serves ids only from v12: a
v10-11 request with a null name or a non-zero id is refused as Kafka's ``KafkaApis`` refuses it
(InvalidRequestException, answered by ``MetadataRequest.getErrorResponse``): every named topic
answers INVALID_REQUEST, a null name as "" (those versions' answers have no null names), and
one rate-limited line is logged (issue 26 row 3; before, the null name reached the encoder).

A request may name thousands of topics: missing ones are created in chunks (topics.json written
once per chunk) and the handler yields to the event loop between chunks and while it builds a
large answer, so other connections are served meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from oncelog.acl.model import ResourceType
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _cluster
from oncelog.protocol.messages import Builder
from oncelog.broker.partitions.replica_manager import NewTopic
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # kio's classes of the versions served (annotations only)
    from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
    from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
    from kio.schema.metadata.v2.request import MetadataRequest as MetadataRequestV2
    from kio.schema.metadata.v3.request import MetadataRequest as MetadataRequestV3
    from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
    from kio.schema.metadata.v5.request import MetadataRequest as MetadataRequestV5
    from kio.schema.metadata.v6.request import MetadataRequest as MetadataRequestV6
    from kio.schema.metadata.v7.request import MetadataRequest as MetadataRequestV7
    from kio.schema.metadata.v8.request import MetadataRequest as MetadataRequestV8
    from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9
    from kio.schema.metadata.v10.request import MetadataRequest as MetadataRequestV10
    from kio.schema.metadata.v11.request import MetadataRequest as MetadataRequestV11
    from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
    from kio.schema.metadata.v13.request import MetadataRequest as MetadataRequestV13
    MetadataRequest = (
        MetadataRequestV0 | MetadataRequestV1 | MetadataRequestV2 | MetadataRequestV3 | MetadataRequestV4 |
        MetadataRequestV5 | MetadataRequestV6 | MetadataRequestV7 | MetadataRequestV8 | MetadataRequestV9 |
        MetadataRequestV10 | MetadataRequestV11 | MetadataRequestV12 | MetadataRequestV13
    )

API_KEY = apis.METADATA
TOPIC_IDS_FROM = 12  # the first version whose requests may name topics by id (KIP-516)
_NO_ID = uuid.UUID(int=0)
CREATE_CHUNK = 100  # topics auto-created per topics.json write
YIELD_EVERY = 1000  # topics answered between yields to the event loop


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    if 10 <= request.api_version < TOPIC_IDS_FROM and req.topics is not None and any(
        t.name is None or t.topic_id not in (None, _NO_ID) for t in req.topics  # kio reads a zero id as None
    ):
        log.info("refused Metadata v%d from %s: a topic named by id or with a null name (topic ids are served "
                 "from v%d)", request.api_version, client.peer, TOPIC_IDS_FROM)
        return _refused(m, req, broker, ErrorCode.invalid_request)
    rm = broker.replicas
    topics: list[Any] = []
    g = _acl.gate(broker, client, API_KEY)
    hidden: set[str] = set()  # named topics it may not describe
    if req.topics is None:
        names = sorted(rm.topics)
        if g is not None:
            names = [n for n in names if g.allowed("topic", n)]
    else:
        names = []
        for t in req.topics:
            name = t.name
            if name is None:  # v12+ (v10-11 were refused above): named by its id (a zero id is unknown)
                meta = rm.topic_by_id(t.topic_id)
                if meta is None:
                    topics.append(
                        m.MetadataResponseTopic(
                            error_code=ErrorCode.unknown_topic_id, name=None, topic_id=t.topic_id, partitions=()
                        )
                    )
                    continue
                name = meta.name
                if g is not None and not g.allowed("topic", name):
                    topics.append(m.MetadataResponseTopic(error_code=ErrorCode.topic_authorization_failed, name=None,
                                                          topic_id=t.topic_id, partitions=()))
                    continue
            elif g is not None and not g.allowed("topic", name):
                hidden.add(name)
            names.append(name)
    # A topic named twice is answered once, as Kafka answers (a set of names): an existing topic's
    # partitions named 100,000 times must not make an answer 100,000 times its size (row 9).
    names = list(dict.fromkeys(names))
    allow_create = getattr(req, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
    refused: dict[str, ErrorCode] = {name: ErrorCode.topic_authorization_failed for name in hidden}
    if allow_create:
        missing = [n for n in names if n not in rm.topics and n not in hidden]
        if g is not None and missing and not g.allowed("create_cluster"):
            for n in missing:
                if not g.allowed("create_topic", n):
                    refused[n] = ErrorCode.topic_authorization_failed
            missing = [n for n in missing if n not in refused]
        for i in range(0, len(missing), CREATE_CHUNK):
            chunk = missing[i : i + CREATE_CHUNK]
            for name, result in zip(chunk, await _cluster.create_topics(broker, [NewTopic(n) for n in chunk])):
                if isinstance(result, KafkaError):
                    refused[name] = result.code
            await asyncio.sleep(0)
    for i, name in enumerate(names):
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
        meta = None if name in hidden else rm.topics.get(name)
        if meta is None:
            error = refused.get(name, ErrorCode.unknown_topic_or_partition)
            topics.append(m.MetadataResponseTopic(error_code=error, name=name, topic_id=uuid.UUID(int=0), partitions=()))
            continue
        parts = tuple(_partition(broker, m, meta.name, p) for p in range(meta.num_partitions))
        topics.append(
            m.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=meta.name,
                topic_id=meta.topic_id,
                is_internal=meta.internal,
                partitions=parts,
                topic_authorized_operations=_acl.authorized_operations(
                    g, req, "include_topic_authorized_operations", ResourceType.TOPIC, meta.name),
            )
        )
    return m.MetadataResponse(
        error_code=ErrorCode.none,  # v13+ (KIP-1102: REBOOTSTRAP_REQUIRED is never needed here)
        brokers=tuple(m.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
                      for n in _cluster.nodes_or_self(broker)),
        cluster_id=broker.cluster_id,
        controller_id=_cluster.controller_id(broker),
        topics=tuple(topics),
        cluster_authorized_operations=_acl.cluster_operations(g, req),
    )


def _partition(broker: BrokerContext, m: Builder, topic: str, p: int) -> Any:
    """One partition's leader, epoch, replicas and ISR (``_cluster.partition_leader``)."""
    code, leader, epoch = _cluster.partition_leader(broker, TopicPartition(topic, p))
    replicas = (leader,) if leader >= 0 else ()
    return m.MetadataResponsePartition(error_code=code, partition_index=p, leader_id=leader, leader_epoch=epoch,
                                       replica_nodes=replicas, isr_nodes=replicas, offline_replicas=())


def _refused(m: Builder, req: "MetadataRequest", broker: BrokerContext, code: ErrorCode) -> Any:
    """Kafka's ``MetadataRequest.getErrorResponse``: each named topic answers ``code``."""
    topics = tuple(m.MetadataResponseTopic(error_code=code, name=t.name if t.name is not None else "",
                                           topic_id=t.topic_id, partitions=())
                   for t in req.topics)
    return m.MetadataResponse(error_code=code, brokers=(), cluster_id=broker.cluster_id, controller_id=-1,
                              topics=topics)

"""Metadata (3): brokers, cluster id, controller, and topics with their partitions.

Topics that do not exist are created when ``auto.create.topics.enable`` is on and the request
allows it (v4+ ``allow_auto_topic_creation``; always allowed before v4), with
``num.partitions`` partitions, as Kafka does. A null topic list means all topics; internal topics
are listed too (clients filter them). With one broker, every partition's leader, replica set
and ISR is this broker.
"""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError

API_KEY = apis.METADATA


async def handle(broker: Any, request: Any) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    rm = broker.replicas
    topics: list[Any] = []
    if req.topics is None:
        names = sorted(rm.topics)
    else:
        names = []
        for t in req.topics:
            name = t.name
            if name is None and getattr(t, "topic_id", None):
                meta = rm.topic_by_id(t.topic_id)
                if meta is None:
                    topics.append(
                        m.MetadataResponseTopic(
                            error_code=ErrorCode.unknown_topic_id, name=None, topic_id=t.topic_id, partitions=()
                        )
                    )
                    continue
                name = meta.name
            names.append(name)
    allow_create = getattr(req, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
    for name in names:
        meta = rm.topics.get(name)
        if meta is None:
            error = ErrorCode.unknown_topic_or_partition
            if allow_create:
                try:
                    meta = rm.create_topic(name)
                except KafkaError as exc:
                    error = exc.code
            if meta is None:
                topics.append(
                    m.MetadataResponseTopic(error_code=error, name=name, topic_id=uuid.UUID(int=0), partitions=())
                )
                continue
        node = broker.node_id
        parts = tuple(
            m.MetadataResponsePartition(
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for p in range(meta.num_partitions)
        )
        topics.append(
            m.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=meta.name,
                topic_id=meta.topic_id,
                is_internal=meta.internal,
                partitions=parts,
                topic_authorized_operations=-2147483648,
            )
        )
    return m.MetadataResponse(
        brokers=(m.MetadataResponseBroker(node_id=broker.node_id, host=broker.advertised_host, port=broker.advertised_port, rack=None),),
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )

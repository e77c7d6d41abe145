"""WriteTxnMarkers (27): append COMMIT/ABORT markers on partitions this broker leads (R14).

Sent by a transaction coordinator on another broker of the cluster (broker/partitions/markers.py) and by
admin tools aborting a hanging transaction (``kafka-transactions.sh abort``). Each partition is
written by ``markers.write_local``, the same code the local coordinator uses: idempotent (a
partition where the producer has no open transaction is answered NONE, nothing written), a
marker from an older producer epoch gets INVALID_PRODUCER_EPOCH, one from an older coordinator
epoch than the last marker of that producer there TRANSACTION_COORDINATOR_FENCED, a partition
this broker does not lead NOT_LEADER_OR_FOLLOWER (the coordinator retries at the new leader).
Each partition gets its own code.

The markers of one request are written together (issue 28): each takes its place in its
producer's line on its partition first (``markers.begin_local``, in request order), then the
connection is released for its next WriteTxnMarkers (broker/pipelining.py: a coordinator's
markers for several transactions share this broker's commit rounds instead of waiting one
COMMIT each, in turn), then all are awaited; the answer goes out once every marker is durable.

Crash points (``oncelog.faults``): ``write_txn_markers.after_begin`` (every marker submitted,
none known durable), ``write_txn_markers.after_markers`` (every marker durable, no answer sent).
"""

from __future__ import annotations

from typing import Any, Awaitable

from oncelog.broker import pipelining
from oncelog.broker.partitions import markers
from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

API_KEY = apis.WRITE_TXN_MARKERS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    m = Builder(API_KEY, request.api_version)
    now = broker.clock.now_ms()
    # ACLs (issue 18): CLUSTER_ACTION on the cluster, else every partition is refused, nothing written
    refused = _acl.denied(_acl.gate(broker, client, API_KEY), "cluster")
    # every marker begun (in its producer's line) before any is awaited: one commit round for all
    begun: list[tuple[Any, list[tuple[int, Awaitable[None] | ErrorCode]]]] = []
    for marker in request.body.markers:
        for topic in marker.topics:
            parts: list[tuple[int, Awaitable[None] | ErrorCode]] = []
            for index in topic.partition_indexes:
                try:
                    if refused is not None:
                        _acl.refuse(refused, client.principal, "CLUSTER_ACTION (WriteTxnMarkers)")
                    parts.append((index, markers.begin_local(
                        broker.replicas, broker.groups, marker.producer_id, marker.producer_epoch,
                        bool(marker.transaction_result), marker.coordinator_epoch,
                        TopicPartition(topic.name, index), now)))
                except KafkaError as exc:
                    parts.append((index, exc.code))
            begun.append((topic, parts))
    pipelining.submitted()
    broker.replicas.crash.reached("write_txn_markers.after_begin")
    results = []
    i = 0
    for marker in request.body.markers:
        topics = []
        for _ in marker.topics:
            topic, parts = begun[i]
            i += 1
            answered = []
            for index, pending in parts:
                if isinstance(pending, ErrorCode):
                    code = pending
                else:
                    try:
                        await pending
                        code = ErrorCode.none
                    except KafkaError as exc:
                        code = exc.code
                answered.append(m.WritableTxnMarkerPartitionResult(partition_index=index, error_code=code))
            topics.append(m.WritableTxnMarkerTopicResult(name=topic.name, partitions=tuple(answered)))
        results.append(m.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=tuple(topics)))
    broker.replicas.crash.reached("write_txn_markers.after_markers")
    return m.WriteTxnMarkersResponse(markers=tuple(results))

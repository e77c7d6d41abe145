"""AlterPartitionReassignments (45): move partitions' replicas (v0..v1).

A partition has one replica, the broker leading it (the store keeps the data in cluster mode),
so the only reassignment that can be carried out is to the replicas it already has: that one
succeeds at once (NONE, as Kafka answers a reassignment that changes nothing). Cancelling
(null replicas) answers NO_REASSIGNMENT_IN_PROGRESS, as Kafka does when none is ongoing; any
other target INVALID_REPLICA_ASSIGNMENT naming why; unknown partitions
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from kio.schema.types import BrokerId

API_KEY = apis.ALTER_PARTITION_REASSIGNMENTS


def _outcome(broker: BrokerContext, tp: TopicPartition,
             replicas: "tuple[BrokerId, ...] | None") -> tuple[ErrorCode, str | None]:
    if not broker.replicas.exists(tp):
        return ErrorCode.unknown_topic_or_partition, f"partition {tp.topic}-{tp.partition} does not exist"
    if replicas is None:
        return ErrorCode.no_reassignment_in_progress, f"no reassignment of {tp.topic}-{tp.partition} is in progress"
    leader = broker.metadata.leader(tp)[0]
    if list(replicas) == [leader]:
        return ErrorCode.none, None
    return (ErrorCode.invalid_replica_assignment,
            f"{tp.topic}-{tp.partition} has one replica, its leader {leader}; replicas {list(replicas)} cannot be "
            f"placed (oncelog does not replicate partitions between brokers)")


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")  # ACLs (issue 18, acl/rules.py)
    req = request.body
    m = Builder(API_KEY, request.api_version)
    responses = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, message = _outcome(broker, TopicPartition(t.name, p.partition_index), p.replicas)
            parts.append(m.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code,
                                                         error_message=message))
        responses.append(m.ReassignableTopicResponse(name=t.name, partitions=tuple(parts)))
    return m.AlterPartitionReassignmentsResponse(
        allow_replication_factor_change=getattr(req, "allow_replication_factor_change", True),
        error_code=ErrorCode.none, error_message=None, responses=tuple(responses))

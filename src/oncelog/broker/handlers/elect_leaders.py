"""ElectLeaders (43): preferred or unclean leader elections (v0..v2).

Embedded, this broker leads every partition and is each one's only replica, its preferred one:
there is never anything to elect, so every named partition answers ELECTION_NOT_NEEDED (as
Kafka answers for a partition already led by its preferred replica) and a request for all
partitions (null) answers an empty list (Kafka lists only the partitions it elected). Unknown
partitions answer UNKNOWN_TOPIC_OR_PARTITION.

In cluster mode the store holds the data and the "preferred" leader of a partition is where
the placement policy wants it (cluster/assignment.py): a preferred election runs a rebalance
(cluster/leadership.rebalance), and a partition whose leader it changed answers NONE, the others
ELECTION_NOT_NEEDED; one still without a live leader PREFERRED_LEADER_NOT_AVAILABLE. An unclean
election never loses data here (there are no out-of-sync replicas), so it is answered the same.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

API_KEY = apis.ELECT_LEADERS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")  # ACLs (issue 18, acl/rules.py)
    req = request.body
    m = Builder(API_KEY, request.api_version)
    rm = broker.replicas
    wanted: list[TopicPartition] | None = None
    if req.topic_partitions is not None:
        wanted = [TopicPartition(t.topic, p) for t in req.topic_partitions for p in t.partitions]
    try:
        election = await broker.metadata.elect_preferred()
    except KafkaError as exc:
        return m.ElectLeadersResponse(error_code=exc.code, replica_election_results=())

    def result(tp: TopicPartition) -> tuple[ErrorCode, str | None]:
        if not rm.exists(tp):
            return ErrorCode.unknown_topic_or_partition, f"partition {tp.topic}-{tp.partition} does not exist"
        return election.outcome(tp)

    if wanted is None:  # all partitions: Kafka lists only those an election changed
        wanted = list(election.moved)
    by_topic: dict[str, list[Any]] = {}
    for tp in wanted:
        code, message = result(tp)
        by_topic.setdefault(tp.topic, []).append(
            m.PartitionResult(partition_id=tp.partition, error_code=code, error_message=message))
    return m.ElectLeadersResponse(
        error_code=ErrorCode.none,
        replica_election_results=tuple(m.ReplicaElectionResult(topic=t, partition_result=tuple(ps))
                                       for t, ps in by_topic.items()),
    )

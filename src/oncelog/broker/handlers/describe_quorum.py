"""DescribeQuorum (55): the KRaft metadata quorum (``__cluster_metadata``-0), v0..v2.

oncelog has no Raft quorum: embedded, the broker is its own metadata; in cluster mode the
metadata lives in PostgreSQL. The answer is Kafka's for a single-voter quorum: the controller
(this broker embedded, the live broker with the lowest id in cluster mode, as Metadata names it)
is the leader and only voter, every other live broker an observer, all caught up (log end offset
= high watermark = 0, timestamps now). Any other topic-partition answers
UNKNOWN_TOPIC_OR_PARTITION, as Kafka's raft client does.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers import _cluster
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

API_KEY = apis.DESCRIBE_QUORUM
METADATA_TOPIC = "__cluster_metadata"


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    _acl.check(_acl.gate(broker, client, API_KEY), "cluster")  # ACLs (issue 18, acl/rules.py)
    req = request.body
    m = Builder(API_KEY, request.api_version)
    leader = _cluster.controller_id(broker)
    nodes = _cluster.nodes(broker)
    now = broker.clock.now_ms()

    def state(node_id: int) -> Any:
        return m.ReplicaState(replica_id=node_id, replica_directory_id=None, log_end_offset=0,
                              last_fetch_timestamp=now, last_caught_up_timestamp=now)

    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.topic_name != METADATA_TOPIC or p.partition_index != 0:
                parts.append(m.PartitionData(partition_index=p.partition_index,
                                             error_code=ErrorCode.unknown_topic_or_partition, error_message=None,
                                             leader_id=-1, leader_epoch=-1, high_watermark=-1, current_voters=(),
                                             observers=()))
                continue
            parts.append(m.PartitionData(
                partition_index=0, error_code=ErrorCode.none, error_message=None, leader_id=leader, leader_epoch=1,
                high_watermark=0, current_voters=(state(leader),),
                observers=tuple(state(n.node_id) for n in nodes if n.node_id != leader)))
        topics.append(m.TopicData(topic_name=t.topic_name, partitions=tuple(parts)))
    return m.DescribeQuorumResponse(
        error_code=ErrorCode.none, error_message=None, topics=tuple(topics),
        nodes=tuple(m.Node(node_id=n.node_id, listeners=(m.Listener(name="PLAINTEXT", host=n.host, port=n.port),))
                    for n in nodes if n.node_id == leader) if m.has_class("Node") else (),  # v2+
    )

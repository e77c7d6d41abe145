"""CreatePartitions (37): grow live topics (every version, v0..v3).

Per topic, as Kafka's controller answers: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS for a
count that is not an increase ("Topic already has 3 partition(s).", "... would not be an
increase."), INVALID_REPLICA_ASSIGNMENT when manual assignments do not give one replica list
per new partition or name a broker that is not live, INVALID_REQUEST for a topic named twice
("Duplicate topic name.") and for the internal topics ``__consumer_offsets`` and
``__transaction_state``: the coordinators place every group and transactional id by their
partition count, so they cannot grow here. ``validate_only`` checks without changing anything.

Embedded, ``ReplicaManager.add_partitions`` writes the new count to topics.json and opens the
new partitions. In cluster mode the topic's row and its new partition rows change in one store
transaction, then a rebalance gives the new partitions leaders (broker/membership/cluster_member.py).
Producers and consumers find the new partitions at their next metadata refresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers import _cluster
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, InvalidRequest, KafkaError, error_for
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder

if TYPE_CHECKING:  # kio's class of each version this handler serves (annotations only)
    from kio.schema.create_partitions.v0.request import CreatePartitionsTopic as CreatePartitionsTopicV0
    from kio.schema.create_partitions.v1.request import CreatePartitionsTopic as CreatePartitionsTopicV1
    from kio.schema.create_partitions.v2.request import CreatePartitionsTopic as CreatePartitionsTopicV2
    from kio.schema.create_partitions.v3.request import CreatePartitionsTopic as CreatePartitionsTopicV3
    CreatePartitionsTopic = (
        CreatePartitionsTopicV0 | CreatePartitionsTopicV1 | CreatePartitionsTopicV2 | CreatePartitionsTopicV3
    )

API_KEY = apis.CREATE_PARTITIONS


def _check_assignments(broker: BrokerContext, t: "CreatePartitionsTopic", current: int) -> None:
    if t.assignments is None:
        return
    added = t.count - current
    if len(t.assignments) != added:
        raise error_for(ErrorCode.invalid_replica_assignment,
                        f"Attempted to add {added} additional partition(s), but only "
                        f"{len(t.assignments)} assignment(s) were specified.")
    live = {n.node_id for n in _cluster.nodes(broker)}
    for a in t.assignments:
        ids = list(a.broker_ids)
        if not ids or len(set(ids)) != len(ids) or not set(ids) <= live:
            raise error_for(ErrorCode.invalid_replica_assignment,
                            f"replica assignment {ids} must name distinct live brokers ({sorted(live)})")


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    validate_only = bool(req.validate_only)
    names = [t.name for t in req.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    outcome: dict[str, KafkaError | None] = {}
    g = _acl.gate(broker, client, API_KEY)
    for t in req.topics:
        if t.name in duplicates:
            outcome[t.name] = InvalidRequest("Duplicate topic name.")
            continue
        try:
            denied = _acl.denied(g, "topic", t.name)  # ACLs (issue 18): ALTER on the topic
            if denied is not None:
                _acl.refuse(denied, client.principal, f"ALTER topic {t.name}")
            meta = broker.replicas.check_partition_increase(t.name, t.count)
            _check_assignments(broker, t, meta.num_partitions)
            if broker.cluster is not None:
                if not validate_only:
                    await broker.cluster.add_partitions(t.name, t.count)
            else:
                broker.replicas.add_partitions(t.name, t.count, validate_only=validate_only)
            outcome[t.name] = None
        except KafkaError as exc:
            outcome[t.name] = exc
    results = []
    for name in dict.fromkeys(names):
        err = outcome[name]
        results.append(m.CreatePartitionsTopicResult(
            name=name, error_code=ErrorCode.none if err is None else err.code,
            error_message=None if err is None else str(err)))
    return m.CreatePartitionsResponse(results=tuple(results))

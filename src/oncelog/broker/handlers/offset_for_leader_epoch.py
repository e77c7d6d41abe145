"""OffsetForLeaderEpoch (23): the end offset of a leader epoch (KIP-101; consumers since KIP-320).

A consumer whose position carries a leader epoch (from a committed offset, or from the batches
it fetched) asks the new leader after a leader change where that epoch ended; an end offset
below its position means the log was truncated under it. Per partition, as Kafka's leader:

1. not led here: NOT_LEADER_OR_FOLLOWER (cluster mode: another broker leads it), or
   UNKNOWN_TOPIC_OR_PARTITION;
2. ``current_leader_epoch`` (v2+; -1 skips the check) older than the leader's:
   FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH;
3. ``storage/leader_epochs.end_offset_for_epoch``: the current epoch ends at the log end offset;
   an older one at the first batch of a greater epoch, answered with the largest epoch <= it
   that wrote batches; -1 or an epoch above the current one: (-1, -1) with no error.

Embedded, the leader epoch is always 0. ``replica_id`` (v3+: -1 a consumer, -2 a debugging
tool, >= 0 a follower) changes nothing: every answer comes from the leader, as Kafka 4's
``fetchOnlyFromLeader``. Versions 2..4 only: Kafka 4 removed 0 and 1 (KIP-896) and kio has no
schema for them.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.storage.leader_epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET, check_current_epoch, end_offset_for_epoch

API_KEY = apis.OFFSET_FOR_LEADER_EPOCH


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    topics = []
    g = _acl.gate(broker, client, API_KEY)
    if g is not None and g.allowed("follower"):
        g = None  # ACLs (issue 18), as Kafka: CLUSTER_ACTION on the cluster covers every topic, else DESCRIBE each
    for t in req.topics:
        results = []
        denied = _acl.denied(g, "topic", t.topic)  # ACLs (issue 18): DESCRIBE on the topic
        for p in t.partitions:
            try:
                if denied is not None:
                    _acl.refuse(denied, client.principal, f"DESCRIBE topic {t.topic}")
                part = broker.replicas.partition(t.topic, p.partition)
                plog = part.log
                current = plog.leader_epoch
                check_current_epoch(f"{t.topic}-{p.partition}", getattr(p, "current_leader_epoch", UNDEFINED_EPOCH),
                                    current)
                epoch, end = end_offset_for_epoch(p.leader_epoch, current, plog.log_end_offset, plog.epoch_bounds)
                results.append(m.EpochEndOffset(error_code=ErrorCode.none, partition=p.partition,
                                                leader_epoch=epoch, end_offset=end))
            except KafkaError as exc:
                results.append(m.EpochEndOffset(error_code=exc.code, partition=p.partition,
                                                leader_epoch=UNDEFINED_EPOCH, end_offset=UNDEFINED_OFFSET))
        topics.append(m.OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(results)))
    return m.OffsetForLeaderEpochResponse(topics=tuple(topics))

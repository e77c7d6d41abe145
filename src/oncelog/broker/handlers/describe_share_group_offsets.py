"""DescribeShareGroupOffsets (90): per share group (KIP-932, issue 30) and partition, its
share-partition start offset (SPSO: every record before it is acknowledged or archived) and
(v1) its lag: the records from the SPSO to the high watermark not yet acknowledged or archived.
``topics`` null: every partition the group has state for. A partition the group has no state for
answers start offset -1; a group unknown GROUP_ID_NOT_FOUND. In cluster mode the offsets are the
store's, whichever broker leads each partition; the lag and leader epoch of a partition led by
another broker are -1 (its high watermark is not known here). ACLs: DESCRIBE on the group,
DESCRIBE on each topic (left out when refused, as Kafka)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _share
from oncelog.coordinator.share.partition import RecordState
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, GroupIdNotFound, KafkaError, UnknownTopicOrPartition
from oncelog.protocol.framing import Request
from oncelog.protocol.messages import Builder
from oncelog.types import TopicPartition

API_KEY = apis.DESCRIBE_SHARE_GROUP_OFFSETS


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    svc = _share.service(broker)
    await svc.ready()
    g = _acl.gate(broker, client, API_KEY)
    rm = broker.replicas
    out = []
    for grp in req.groups:
        try:
            _acl.check(g, "group", grp.group_id)
            if not await svc.exists(grp.group_id):
                raise GroupIdNotFound(f"Group {grp.group_id} not found.")
            state = await svc.offsets(grp.group_id)
        except KafkaError as exc:
            out.append(m.DescribeShareGroupOffsetsResponseGroup(group_id=grp.group_id, topics=(), error_code=exc.code,
                                                                error_message=str(exc)))
            continue
        if grp.topics is None:
            wanted: dict[str, list[int]] = {}
            for (tid, p) in sorted(state, key=lambda k: (str(k[0]), k[1])):
                meta = rm.topic_by_id(tid)
                if meta is not None:
                    wanted.setdefault(meta.name, []).append(p)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in grp.topics}
        topics = []
        for name, parts in wanted.items():
            if g is not None and not g.allowed("topic", name):
                continue
            meta = rm.topics.get(name)
            rows = []
            for p in parts:
                sp = state.get((meta.topic_id, p)) if meta is not None else None
                try:
                    if meta is None or not 0 <= p < meta.num_partitions:
                        raise UnknownTopicOrPartition(f"{name}-{p} does not exist")
                    part = rm.partitions.get(TopicPartition(name, p))  # None: led by another broker
                except KafkaError as exc:
                    rows.append(m.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1, error_code=exc.code,
                        error_message=str(exc)))
                    continue
                lag = -1
                if sp is not None and part is not None:
                    done = sum(1 for r in sp.records.values() if r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
                    lag = max(part.high_watermark - sp.spso - done, 0)
                rows.append(m.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=sp.spso if sp is not None else -1,
                    leader_epoch=part.log.leader_epoch if part is not None else -1, lag=lag, error_code=ErrorCode.none, error_message=None))
            topics.append(m.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=meta.topic_id if meta is not None else None, partitions=tuple(rows)))
        out.append(m.DescribeShareGroupOffsetsResponseGroup(group_id=grp.group_id, topics=tuple(topics),
                                                            error_code=ErrorCode.none, error_message=None))
    return m.DescribeShareGroupOffsetsResponse(groups=tuple(out))

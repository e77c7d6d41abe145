"""Fetch (1): record batches from several partitions, long-polling for min_bytes.

Batches are served whole, as file slices of the log or in-memory chunks of a database engine
(no record parsing, no copy into Python objects). Limits: each partition up to its partition_max_bytes, the response up to max_bytes,
and never more than the broker's ``fetch.max.bytes`` (55 MB, Kafka's default: a client asking for
2 GB gets 55 MB), except that the first non-empty partition always returns at least one whole
batch even if it is larger than all of them (KIP-74), so a consumer never gets stuck behind a big
batch. The server sends the answer in bounded pieces as the client reads it (sendfile, or on TLS
listeners pieces read and encrypted one at a time: network/server.py).

Long poll: when fewer than min_bytes are available, the request waits up to max_wait (at most
the broker's ``fetch.max.wait.ms``, 500 ms: a request asking for 24 days is answered in half a
second) for any of its partitions to receive data, then answers with whatever there is. It stops
waiting at once when its connection closes, so a parked fetch never outlives its client.

Isolation: read_uncommitted reads up to the high watermark; read_committed up to the last stable
offset (R15).

Leader epochs (KIP-320, v9+): a partition whose ``current_leader_epoch`` (-1: not checked) is
older than the leader's answers FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, and
nothing is read for it. ``current_leader`` (KIP-951, v16+): a partition answered
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH in cluster mode names the leader of the broker's
view and the answer carries that broker's endpoint (``node_endpoints``), so the client moves
without a metadata round trip; unset when the view knows no live leader. ``last_fetched_epoch``
(v12+, sent by followers; consumers send -1) is not checked: there are no followers, so no
``diverging_epoch`` is ever answered.

Topic ids (KIP-516, v13+): topics are named by id in the request and the answer; an id this
broker does not know answers UNKNOWN_TOPIC_ID for each of its partitions. v15 moves the replica
id into ``replica_state`` (consumers send -1); v17/v18 add follower-only fields, not used.

Fetch sessions (KIP-227) are not kept: every answer has session id 0, which tells clients to
send full fetch requests; that is a documented, supported mode of the protocol.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl, _cluster
from oncelog.protocol.messages import Builder
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError, TopicAuthorizationFailed, UnknownTopicId
from oncelog.protocol.framing import FileRecords
from oncelog.protocol.framing import Request
from oncelog.storage.parts import parts_length
from oncelog.storage.leader_epochs import UNDEFINED_EPOCH, check_current_epoch
from oncelog.types import TopicPartition

if TYPE_CHECKING:  # kio's classes of the versions served (annotations only)
    from oncelog.broker.observability.metrics import RequestStats
    from kio.schema.fetch.v4.request import FetchRequest as FetchRequestV4
    from kio.schema.fetch.v5.request import FetchRequest as FetchRequestV5
    from kio.schema.fetch.v6.request import FetchRequest as FetchRequestV6
    from kio.schema.fetch.v7.request import FetchRequest as FetchRequestV7
    from kio.schema.fetch.v8.request import FetchRequest as FetchRequestV8
    from kio.schema.fetch.v9.request import FetchRequest as FetchRequestV9
    from kio.schema.fetch.v10.request import FetchRequest as FetchRequestV10
    from kio.schema.fetch.v11.request import FetchRequest as FetchRequestV11
    from kio.schema.fetch.v12.request import FetchRequest as FetchRequestV12
    from kio.schema.fetch.v13.request import FetchRequest as FetchRequestV13
    from kio.schema.fetch.v14.request import FetchRequest as FetchRequestV14
    from kio.schema.fetch.v15.request import FetchRequest as FetchRequestV15
    from kio.schema.fetch.v16.request import FetchRequest as FetchRequestV16
    from kio.schema.fetch.v17.request import FetchRequest as FetchRequestV17
    from kio.schema.fetch.v18.request import FetchRequest as FetchRequestV18
    FetchRequest = (
        FetchRequestV4 | FetchRequestV5 | FetchRequestV6 | FetchRequestV7 | FetchRequestV8 | FetchRequestV9 |
        FetchRequestV10 | FetchRequestV11 | FetchRequestV12 | FetchRequestV13 | FetchRequestV14 |
        FetchRequestV15 | FetchRequestV16 | FetchRequestV17 | FetchRequestV18
    )
    from kio.schema.fetch.v4.response import FetchableTopicResponse as FetchableTopicResponseV4
    from kio.schema.fetch.v5.response import FetchableTopicResponse as FetchableTopicResponseV5
    from kio.schema.fetch.v6.response import FetchableTopicResponse as FetchableTopicResponseV6
    from kio.schema.fetch.v7.response import FetchableTopicResponse as FetchableTopicResponseV7
    from kio.schema.fetch.v8.response import FetchableTopicResponse as FetchableTopicResponseV8
    from kio.schema.fetch.v9.response import FetchableTopicResponse as FetchableTopicResponseV9
    from kio.schema.fetch.v10.response import FetchableTopicResponse as FetchableTopicResponseV10
    from kio.schema.fetch.v11.response import FetchableTopicResponse as FetchableTopicResponseV11
    from kio.schema.fetch.v12.response import FetchableTopicResponse as FetchableTopicResponseV12
    from kio.schema.fetch.v13.response import FetchableTopicResponse as FetchableTopicResponseV13
    from kio.schema.fetch.v14.response import FetchableTopicResponse as FetchableTopicResponseV14
    from kio.schema.fetch.v15.response import FetchableTopicResponse as FetchableTopicResponseV15
    from kio.schema.fetch.v16.response import FetchableTopicResponse as FetchableTopicResponseV16
    from kio.schema.fetch.v17.response import FetchableTopicResponse as FetchableTopicResponseV17
    from kio.schema.fetch.v18.response import FetchableTopicResponse as FetchableTopicResponseV18
    FetchableTopicResponse = (
        FetchableTopicResponseV4 | FetchableTopicResponseV5 | FetchableTopicResponseV6 |
        FetchableTopicResponseV7 | FetchableTopicResponseV8 | FetchableTopicResponseV9 |
        FetchableTopicResponseV10 | FetchableTopicResponseV11 | FetchableTopicResponseV12 |
        FetchableTopicResponseV13 | FetchableTopicResponseV14 | FetchableTopicResponseV15 |
        FetchableTopicResponseV16 | FetchableTopicResponseV17 | FetchableTopicResponseV18
    )

API_KEY = apis.FETCH
READ_COMMITTED = 1


def _collect(broker: BrokerContext, req: "FetchRequest", m: Builder, read_committed: bool,
             by_id: bool, leaders: set[int] | None, denied: dict[str, str]) -> tuple[list[Any], int, list[Any], bool]:
    """One pass over the requested partitions: (topic responses, bytes, partitions, any_error).
    ``leaders`` (v16+, cluster mode): collects the node ids named as ``current_leader``.
    ``denied``: topic name -> why it may not be read (TOPIC_AUTHORIZATION_FAILED, issue 18)."""
    budget = min(getattr(req, "max_bytes", 0x7FFFFFFF), broker.config.fetch_max_bytes)  # Kafka's broker cap
    total = 0
    any_error = False
    first_data = True
    parts_seen: list[Any] = []
    topics = []
    rm = broker.replicas
    for t in req.topics:
        results = []
        topic_id = None
        if by_id:  # v13+ (KIP-516): topics by id
            topic_id = t.topic_id
            meta = rm.topic_by_id(topic_id)
            name = meta.name if meta is not None else None
        else:
            name = t.topic
        for p in t.partitions:
            part = None
            try:
                if name is None:
                    raise UnknownTopicId(f"topic id {topic_id} is unknown")
                if denied and name in denied:
                    raise TopicAuthorizationFailed(denied[name])
                part = rm.partition(name, p.partition)  # NOT_LEADER_OR_FOLLOWER when led elsewhere
                # KIP-320 (v9+): FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH before any read
                check_current_epoch(f"{name}-{p.partition}", getattr(p, "current_leader_epoch", UNDEFINED_EPOCH),
                                    part.log.leader_epoch)
                parts_seen.append(part)
                limit = min(p.partition_max_bytes, max(budget - total, 0))
                res = part.read(p.fetch_offset, limit, read_committed=read_committed, min_one_batch=first_data)
                size = parts_length(res.slices)
                if size:
                    first_data = False
                total += size
                results.append(
                    m.PartitionData(
                        partition_index=p.partition,
                        error_code=ErrorCode.none,
                        high_watermark=res.high_watermark,
                        last_stable_offset=res.last_stable_offset,
                        log_start_offset=res.log_start_offset,
                        aborted_transactions=tuple(
                            m.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                            for a in res.aborted
                        )
                        if read_committed
                        else None,
                        preferred_read_replica=-1,
                        records=FileRecords(res.slices),
                    )
                )
            except KafkaError as exc:
                any_error = True
                hw = lso = start = -1
                if part is not None:
                    hw, lso, start = part.high_watermark, part.last_stable_offset, part.log_start_offset
                hint: dict[str, Any] = {}
                if leaders is not None and name is not None and exc.code in _LEADER_MOVED:
                    hint = _current_leader(broker, m, TopicPartition(name, p.partition), leaders)
                results.append(
                    m.PartitionData(
                        **hint,
                        partition_index=p.partition,
                        error_code=exc.code,
                        high_watermark=hw,
                        last_stable_offset=lso,
                        log_start_offset=start,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        # Empty, never null: librdkafka rejects a null record set ("invalid
                        # MessageSetSize -1") and would never see the error; Kafka sends empty.
                        records=b"",
                    )
                )
        topics.append(m.FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=tuple(results)))
    return topics, total, parts_seen, any_error


_LEADER_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


def _current_leader(broker: BrokerContext, m: Builder, tp: TopicPartition, leaders: set[int]) -> dict[str, Any]:
    """KIP-951 (v16+): the leader this broker's view knows for ``tp`` (cluster mode), so the
    client can go there without a metadata round trip; nothing when it knows none."""
    hint = broker.metadata.leader_hint(tp)
    if hint is None:
        return {}
    leader, epoch = hint
    leaders.add(leader)
    return {"current_leader": m.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)}


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    m = Builder(API_KEY, request.api_version)
    read_committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    loop = asyncio.get_running_loop()
    wait = min(max(req.max_wait.total_seconds(), 0.0), broker.config.fetch_max_wait_ms / 1000)
    deadline = loop.time() + wait
    closed = client.closed
    leaders: set[int] | None = set() if request.api_version >= 16 else None
    denied = _authorize(broker, client, req, request.api_version >= 13)  # once, not per long-poll pass
    min_bytes = min(req.min_bytes, broker.config.fetch_max_bytes)  # as Kafka: never waits for more than it may send
    while True:
        topics, total, parts, any_error = _collect(broker, req, m, read_committed, request.api_version >= 13, leaders,
                                                   denied)
        remaining = deadline - loop.time()
        if total >= min_bytes or any_error or remaining <= 0 or not parts or closed.done():
            break
        waiters = [p.waiter() for p in parts]
        try:
            await asyncio.wait([*waiters, closed], timeout=remaining,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
    metrics = broker.metrics  # issue 19: None unless metrics.listen is set
    if metrics is not None:
        _count_out(metrics, broker, topics)
    endpoints = ()
    if leaders:
        endpoints = tuple(m.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
                          for n in _cluster.nodes(broker) if n.node_id in leaders)
    return m.FetchResponse(error_code=ErrorCode.none, session_id=0, responses=tuple(topics), node_endpoints=endpoints)


def _count_out(metrics: "RequestStats", broker: BrokerContext, topics: "list[FetchableTopicResponse]") -> None:
    """Bytes of whole batches answered, per topic (issue 19): the slices' lengths, no parsing;
    once per topic per request."""
    for t in topics:
        n = 0
        for p in t.partitions:
            n += getattr(p.records, "length", 0)
        if not n:
            continue
        name = getattr(t, "topic", None)
        if name is None:  # v13+: the answer names topics by id
            meta = broker.replicas.topic_by_id(t.topic_id)
            name = meta.name if meta is not None else None
        if name is not None:
            metrics.fetched(name, n)


def _authorize(broker: BrokerContext, client: Client, req: "FetchRequest", by_id: bool) -> dict[str, str]:
    """ACLs (issue 18, acl/rules.py): a follower's fetch needs CLUSTER_ACTION (the whole request
    fails); a consumer's needs READ on each topic. Returns the topics it may not read (one check
    per topic per request)."""
    g = _acl.gate(broker, client, API_KEY)
    if g is None:
        return {}
    replica = req.replica_state.replica_id if hasattr(req, "replica_state") else getattr(req, "replica_id", -1)
    if replica >= 0:
        g.require("follower")
    denied: dict[str, str] = {}
    for t in req.topics:
        name = t.topic if not by_id else getattr(broker.replicas.topic_by_id(t.topic_id), "name", None)
        if name is not None and name not in denied and not g.allowed("topic", name):
            denied[name] = f"{client.principal} may not read {name}"
    return denied

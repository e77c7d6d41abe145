"""OffsetFetch (9): a group's committed offsets (R3, R13).

v1: one group, errors per partition; v2..v7: one group, a top-level error, and a null topic list
asks for every committed offset; v7: ``require_stable`` (KIP-447) — a partition with offsets
pending in a transaction answers UNSTABLE_OFFSET_COMMIT; v8: many groups, an error per group;
v9: a member id and epoch per group, checked for consumer groups (KIP-848: UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH); a classic group ignores them, as Kafka's does; v10: topics named by id (an unknown id: UNKNOWN_TOPIC_ID; asked for every
offset, topics that no longer exist are left out, having no id to name them by).
Offsets pending in a transaction are never returned; a partition without a committed offset
gets offset -1.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Sequence

from oncelog.broker.context import BrokerContext, Client
from oncelog.broker.handlers import _acl
from oncelog.broker.handlers._group import ZERO_ID, topic_id_of, topic_key

from oncelog.protocol.messages import Builder
from oncelog.coordinator.group.types import validate_group_id
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode, KafkaError
from oncelog.types import TopicPartition
from oncelog.protocol.framing import Request

if TYPE_CHECKING:  # kio's classes of the versions served (annotations only)
    from oncelog.broker.handlers._group import OffsetFetchTopic, OffsetFetchTopics

API_KEY = apis.OFFSET_FETCH
#: OffsetFetch v10+ names topics by id
TOPIC_IDS_FROM = 10


def _known_id(broker: BrokerContext, name: str) -> uuid.UUID | None:
    """The id of an existing topic, None for one that no longer exists."""
    tid = topic_id_of(broker, name)
    return tid if tid.int else None


def _fetch(broker: BrokerContext, group_id: str, topics: "Sequence[OffsetFetchTopic | OffsetFetchTopics] | None",
           require_stable: bool, g: _acl.Gate | None, member_id: str | None = None, member_epoch: int = -1) -> tuple[list[Any], ErrorCode]:
    """[(tp, committed or None, error code)] in request order (or all committed), group error.
    ACLs (issue 18): DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on each
    topic, else TOPIC_AUTHORIZATION_FAILED for a named partition, and left out of "all"."""
    wanted = None if topics is None else [TopicPartition(topic_key(broker, t), p) for t in topics for p in t.partition_indexes]
    try:
        groups = broker.groups
        validate_group_id(group_id, allow_empty=True)
        _acl.check(g, "group", group_id)
        rows = groups.fetch_offsets(group_id, wanted, require_stable, member_id, member_epoch)
    except KafkaError as exc:
        return [(tp, None, exc.code) for tp in wanted or ()], exc.code
    out = [
        (tp, None, ErrorCode.unknown_topic_id) if tp.topic.startswith("<")  # an id no topic has (v10+)
        else (tp, o, ErrorCode.none if e is None else e.code)
        for tp, o, e in rows
    ]
    if g is not None:
        seen: dict[str, bool] = {}
        for i, (tp, o, code) in enumerate(out):
            if tp.topic not in seen:
                seen[tp.topic] = g.allowed("topic", tp.topic)
            if not seen[tp.topic]:
                out[i] = (tp, None, ErrorCode.topic_authorization_failed)
        if wanted is None:
            out = [row for row in out if seen[row[0].topic]]
    return out, ErrorCode.none


def _topics(m: Builder, rows: list[Any], topic_cls: str, part_cls: str,
            ids: dict[str, uuid.UUID | None] | None = None) -> tuple[Any, ...]:
    """The answer's topics; ``ids`` (v10+): name -> topic id, by which the answer names them
    (a topic without one, deleted since its offsets were committed, is left out; an id asked
    for is answered under that id, the all-zero one too: UNKNOWN_TOPIC_ID, as Kafka)."""
    by_topic: dict[str, list[Any]] = {}
    for tp, o, code in rows:
        by_topic.setdefault(tp.topic, []).append(
            getattr(m, part_cls)(
                partition_index=tp.partition,
                committed_offset=o.offset if o is not None else -1,
                committed_leader_epoch=o.leader_epoch if o is not None else -1,
                metadata=o.metadata if o is not None else "",
                error_code=code,
            )
        )
    if ids is None:
        return tuple(getattr(m, topic_cls)(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return tuple(getattr(m, topic_cls)(topic_id=ids[name], partitions=tuple(parts))
                 for name, parts in by_topic.items() if ids.get(name) is not None)


async def handle(broker: BrokerContext, request: Request, client: Client) -> Any:
    req = request.body
    v = request.api_version
    m = Builder(API_KEY, v)
    require_stable = bool(getattr(req, "require_stable", False))
    gate = _acl.gate(broker, client, API_KEY)
    if v >= 8:
        out = []
        # A group asked for twice with the same topics is answered once (issue 26 row 9): a group's
        # every offset (topics null) repeated up to the entry bound would make an answer of
        # gigabytes. Kafka's clients send a group once, and match answers by group id.
        for g in dict.fromkeys(req.groups):
            rows, code = _fetch(broker, g.group_id, g.topics, require_stable, gate,
                                getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            if code != ErrorCode.none:
                rows = []  # a group-level error carries no partitions (as Kafka)
            ids = None
            if v >= TOPIC_IDS_FROM:
                asked = {topic_key(broker, t): t.topic_id or ZERO_ID for t in g.topics or ()}
                ids = {tp.topic: asked[tp.topic] if tp.topic in asked else _known_id(broker, tp.topic)
                       for tp, _o, _c in rows}
            out.append(
                m.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=code,
                    topics=_topics(m, rows, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions", ids),
                )
            )
        return m.OffsetFetchResponse(groups=tuple(out))
    rows, code = _fetch(broker, req.group_id, req.topics, require_stable, gate)
    if code != ErrorCode.none and v >= 2:
        rows = []
    return m.OffsetFetchResponse(
        error_code=code, topics=_topics(m, rows, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition")
    )

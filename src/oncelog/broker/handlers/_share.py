"""What the share-group handlers (KIP-932, issue 30) share: the service and the acknowledgement
batches of a request, by partition."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from oncelog.broker.configuration import group_config
from oncelog.broker.configuration.topic_config import ConfigSource
from oncelog.broker.context import BrokerContext
from oncelog.protocol.errors import InvalidRequest

if TYPE_CHECKING:
    from oncelog.broker.coordinators.share_coordinator import ShareCoordinator

#: at most this many acknowledgement batches per request (a client sends a few per partition)
MAX_ACK_BATCHES = 100_000


def service(broker: BrokerContext) -> "ShareCoordinator":
    """The broker's share-group service (``BrokerContext.shares``)."""
    return broker.shares


RENEW = 4  # acknowledge type (v2, KIP-1222): only in a request whose is_renew_ack is set


def acks_of(topics: Any, renew: bool = False) -> dict[tuple[uuid.UUID, int], list[tuple[int, int, tuple[int, ...]]]]:
    """(topic id, partition) -> its acknowledgement batches, in request order (a topic may be
    named twice: librdkafka sends the partitions it adds and those it acknowledges apart).
    Raises InvalidRequest for more than ``MAX_ACK_BATCHES`` batches, and for the RENEW type in
    a request that is not ``renew`` (is_renew_ack)."""
    out: dict[tuple[uuid.UUID, int], list[tuple[int, int, tuple[int, ...]]]] = {}
    n = 0
    for t in topics:
        for p in t.partitions:
            for b in p.acknowledgement_batches:
                n += 1
                if n > MAX_ACK_BATCHES:
                    raise InvalidRequest(f"more than {MAX_ACK_BATCHES} acknowledgement batches")
                if not renew and RENEW in b.acknowledge_types:
                    raise InvalidRequest("acknowledge type 4 (renew) needs is_renew_ack")
                out.setdefault((t.topic_id, p.partition_index), []).append(
                    (b.first_offset, b.last_offset, tuple(b.acknowledge_types)))
    return out


_BOOLEAN, _STRING, _INT = 1, 2, 3  # config types
_BROKER_SYNONYM = {"share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
                   "share.delivery.count.limit": "group.share.delivery.count.limit"}


def group_config_rows(broker: BrokerContext, group_id: str) -> list[tuple[str, str | None, bool, int, list, int, str]]:
    """DescribeConfigs rows of a group's configs: the consumer group configs
    (broker/configuration/group_config.py) and the share groups' (coordinator/share/configs.py), each
    the group's own value (GROUP_CONFIG) or its default: the broker config it defaults to, where
    it has one (STATIC_BROKER_CONFIG when the broker sets it, else DEFAULT_CONFIG)."""
    from oncelog.coordinator.share.configs import GROUP_CONFIGS

    rows = [(r.name, r.value, False, int(r.source), list(r.synonyms), int(r.type), r.doc)
            for r in group_config.describe(broker.groups.configs.of(group_id), broker.config)]
    own = service(broker).configs.get(group_id, {})
    for name, default in sorted(GROUP_CONFIGS.items()):
        if name in _BROKER_SYNONYM:
            value, synonyms = group_config.layers(name, own, _BROKER_SYNONYM[name], broker.config)
        else:
            synonyms = ((name, own[name], ConfigSource.GROUP_CONFIG),) if name in own else ()
            synonyms += ((name, default, ConfigSource.DEFAULT_CONFIG),)
            value = synonyms[0][1]
        kind = _STRING if name in ("share.auto.offset.reset", "share.isolation.level") else \
            _BOOLEAN if name == "share.renew.acknowledge.enable" else _INT
        rows.append((name, value, False, int(synonyms[0][2]), list(synonyms), kind, ""))
    return sorted(rows, key=lambda r: r[0])


def refuse_share_group_id(broker: BrokerContext, group_id: str, error: type[Exception]) -> None:
    """A classic or consumer member may not take the id of a share group (where the share service
    knows every share group: the embedded broker, whose share state is its own): raises ``error``
    (Kafka: INCONSISTENT_GROUP_PROTOCOL for JoinGroup, GROUP_ID_NOT_FOUND for
    ConsumerGroupHeartbeat)."""
    if broker.shares.is_share_group(group_id):
        raise error(f"Group {group_id} is a share group.")

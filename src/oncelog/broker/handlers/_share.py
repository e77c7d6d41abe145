"""What the share-group handlers (KIP-932, issue 30) share: the service and the acknowledgement
batches of a request, by partition."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

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


_GROUP_CONFIG, _DEFAULT_CONFIG, _STATIC_BROKER_CONFIG = 8, 6, 5  # DescribeConfigs config sources
_BOOLEAN, _STRING, _INT = 1, 2, 3  # config types
_BROKER_SYNONYM = {"share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
                   "share.delivery.count.limit": "group.share.delivery.count.limit"}


def group_config_rows(broker: BrokerContext, group_id: str) -> list[tuple[str, str | None, bool, int, list, int, str]]:
    """DescribeConfigs rows of a share group's configs: its own value (GROUP_CONFIG) or the
    default (the broker's config for those that have one)."""
    from oncelog.coordinator.share.configs import GROUP_CONFIGS

    svc = service(broker)
    own = svc.configs.get(group_id, {})
    rows = []
    for name, default in sorted(GROUP_CONFIGS.items()):
        synonyms = []
        if name in own:
            synonyms.append((name, own[name], _GROUP_CONFIG))
        if name in _BROKER_SYNONYM:
            broker_name = _BROKER_SYNONYM[name]
            synonyms.append((broker_name, str(broker.config.kafka_value(broker_name)), _STATIC_BROKER_CONFIG))
        else:
            synonyms.append((name, default, _DEFAULT_CONFIG))
        value, source = synonyms[0][1], synonyms[0][2]
        kind = _STRING if name in ("share.auto.offset.reset", "share.isolation.level") else \
            _BOOLEAN if name == "share.renew.acknowledge.enable" else _INT
        rows.append((name, value, False, source, synonyms, kind, ""))
    return rows


def refuse_share_group_id(broker: BrokerContext, group_id: str, error: type[Exception]) -> None:
    """A classic or consumer member may not take the id of a share group (where the share service
    knows every share group: the embedded broker, whose share state is its own): raises ``error``
    (Kafka: INCONSISTENT_GROUP_PROTOCOL for JoinGroup, GROUP_ID_NOT_FOUND for
    ConsumerGroupHeartbeat)."""
    if broker.shares.is_share_group(group_id):
        raise error(f"Group {group_id} is a share group.")

"""What the share-group handlers (KIP-932, issue 30) share: the service and the acknowledgement
batches of a request, by partition."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from oncelog.broker.context import BrokerContext
from oncelog.protocol.errors import InvalidRequest

if TYPE_CHECKING:
    from oncelog.broker.share_coordinator import ShareCoordinator

#: at most this many acknowledgement batches per request (a client sends a few per partition)
MAX_ACK_BATCHES = 100_000


def service(broker: BrokerContext) -> "ShareCoordinator":
    """The broker's share-group service (embedded mode: ``Broker.shares``; not part of
    ``BrokerContext`` while that interface is being reworked)."""
    return getattr(broker, "shares")  # type: ignore[no-any-return]


def acks_of(topics: Any) -> dict[tuple[uuid.UUID, int], list[tuple[int, int, tuple[int, ...]]]]:
    """(topic id, partition) -> its acknowledgement batches, in request order (a topic may be
    named twice: librdkafka sends the partitions it adds and those it acknowledges apart).
    Raises InvalidRequest for more than ``MAX_ACK_BATCHES`` batches."""
    out: dict[tuple[uuid.UUID, int], list[tuple[int, int, tuple[int, ...]]]] = {}
    n = 0
    for t in topics:
        for p in t.partitions:
            for b in p.acknowledgement_batches:
                n += 1
                if n > MAX_ACK_BATCHES:
                    raise InvalidRequest(f"more than {MAX_ACK_BATCHES} acknowledgement batches")
                out.setdefault((t.topic_id, p.partition_index), []).append(
                    (b.first_offset, b.last_offset, tuple(b.acknowledge_types)))
    return out

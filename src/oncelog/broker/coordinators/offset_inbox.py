"""The group coordinator's offset inbox: offsets committed outside the Kafka protocol, which the
coordinator serves and moves into ``__consumer_offsets`` (issue 31, docs/DATABASE.md).

Whether there is one is decided once, when the broker starts, by its membership:

* ``NoInbox`` (the embedded broker, or a store whose role could not install the inbox): nothing
  is committed elsewhere; every call is free and changes nothing;
* ``database/inbox.DatabaseInbox`` (cluster mode): ``oncelog.commit_offsets`` in applications'
  own PostgreSQL transactions.

The group coordinator is handed one of them (``inbox``) and calls it at fixed points of its one
write path, never asking which it has: before an operation (``check_group_id``, and for an
offset write ``has_pending`` then ``drain_locked`` under the shard's lock), after every change
(``mirror``: the inbox's fencing learns of it before any answer goes out), after a load
(``mirror_partition``), when a partition moves away (``forget``) and in OffsetFetch
(``overlay``).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, Sequence

from oncelog.coordinator.group.offsets import CommittedOffset
from oncelog.coordinator.group.shard import GroupShard
from oncelog.coordinator.group.types import Result
from oncelog.protocol.errors import KafkaError
from oncelog.types import TopicPartition

__all__ = ["Execute", "NoInbox", "OffsetInbox", "OffsetRows"]

#: OffsetFetch's rows: (partition, committed offset or None, error or None)
OffsetRows = list[tuple[TopicPartition, CommittedOffset | None, KafkaError | None]]
#: the coordinator's write path: append ``result``'s records to the shard's partition, replay them
Execute = Callable[[GroupShard, Result, int], Awaitable[Any]]


class OffsetInbox(Protocol):
    def check_group_id(self, group_id: str) -> None:
        """Raises InvalidGroupId for a group id the inbox cannot keep (before any change)."""
        ...

    async def has_pending(self, group_id: str) -> bool:
        """Whether the group has commits not drained into the log yet. Raises KafkaError."""
        ...

    async def drain_locked(self, shard: GroupShard, group_id: str, execute: Execute, now: int) -> int:
        """Move the group's pending commits into the log through ``execute`` (the caller holds
        the shard's lock); returns how many. Raises the append's or the inbox's KafkaError."""
        ...

    async def mirror(self, shard: GroupShard, group_id: str | None, records: Sequence[tuple[Any, Any]]) -> None:
        """After an operation on ``group_id`` (None: a timer over the whole shard) that wrote
        ``records``: tell the inbox's fencing of the groups that changed. Never raises."""
        ...

    async def mirror_partition(self, shard: GroupShard) -> None:
        """After ``shard`` was loaded: describe every group of its partition anew. Never raises."""
        ...

    def forget(self, partition: int) -> None:
        """This broker no longer coordinates ``partition``."""
        ...

    def overlay(self, group_id: str, rows: OffsetRows, asked: list[TopicPartition] | None,
                require_stable: bool) -> OffsetRows:
        """OffsetFetch's ``rows`` with the commits the log does not have yet. Raises KafkaError."""
        ...


class NoInbox:
    """No offsets are committed outside the Kafka protocol."""

    def check_group_id(self, group_id: str) -> None:
        pass

    async def has_pending(self, group_id: str) -> bool:
        return False

    async def drain_locked(self, shard: GroupShard, group_id: str, execute: Execute, now: int) -> int:
        return 0

    async def mirror(self, shard: GroupShard, group_id: str | None, records: Sequence[tuple[Any, Any]]) -> None:
        pass

    async def mirror_partition(self, shard: GroupShard) -> None:
        pass

    def forget(self, partition: int) -> None:
        pass

    def overlay(self, group_id: str, rows: OffsetRows, asked: list[TopicPartition] | None,
                require_stable: bool) -> OffsetRows:
        return rows

"""The database bridge of a cluster-mode broker (issue 31, docs/DATABASE.md), opened with its
membership: the outbox's drain and the group coordinator's inbox, as the store has them.

Whether the store has them is decided once, when the broker starts (``open``): a store whose
role could not create the schema ``oncelog`` has neither, and then the group coordinator gets
``NoInbox`` and nothing is drained. ``inbox`` is what the group coordinator is built with;
``start(groups)``, once the broker listens, wakes the drains of both; ``stop_inbox`` stops the
inbox's before the group coordinator stops (its drains write through it); ``stop`` the rest.
"""

from __future__ import annotations

from typing import Callable

import psycopg

from oncelog.broker.coordinators.group_coordinator import GroupCoordinator
from oncelog.broker.coordinators.offset_inbox import NoInbox, OffsetInbox
from oncelog.broker.database.inbox import DatabaseInbox, InboxDrains
from oncelog.broker.database.outbox_drainer import OutboxDrainer
from oncelog.broker.partitions.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.cluster import inbox as store_inbox
from oncelog.cluster.connection import StoreConnection, connector

__all__ = ["DatabaseBridge"]


class DatabaseBridge:
    def __init__(self, dsn: str, reader: StoreConnection, replicas: ReplicaManager,
                 next_producer_id: Callable[[], int], clock: Clock, node_id: int) -> None:
        """``reader``: the event loop's store connection (asked now whether the store has the
        inbox); ``next_producer_id``: the producer ids of the outbox's batches."""
        self._connect = connect = connector(dsn)
        self._node = node_id
        self._outbox = OutboxDrainer(replicas, reader, connect, next_producer_id, clock, node_id)
        self._database_inbox = DatabaseInbox(
            connect, lambda: psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10), node_id)
        self._has_inbox = store_inbox.available(reader)
        #: the group coordinator's inbox: the store's, or none when it has none
        self.inbox: OffsetInbox = self._database_inbox if self._has_inbox else NoInbox()
        self._drains: list[InboxDrains] = []

    def start(self, groups: GroupCoordinator) -> None:
        """Drain the outbox into the partitions led here and the inbox into ``groups`` (the
        coordinator built with ``inbox``)."""
        self._outbox.start()
        if self._has_inbox and not self._drains:
            drains = InboxDrains(self._database_inbox, groups, self._connect, self._node)
            drains.start()
            self._drains.append(drains)

    async def stop_inbox(self) -> None:
        """Stop the inbox's drains and close its connections (before the group coordinator
        stops). Safe a second time."""
        while self._drains:
            await self._drains.pop().stop()
        await self._database_inbox.close()

    async def stop(self) -> None:
        await self.stop_inbox()
        await self._outbox.stop()

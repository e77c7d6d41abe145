"""Share-group state in the store (KIP-932 in cluster mode, issue 30; docs/ARCHITECTURE.md
"share groups").

Theory of operation. A share partition (a share group's view of one topic partition: its start
offset and the delivery state of its records in flight) is served by the broker that leads the
topic partition, because that is where ShareFetch and ShareAcknowledge go. Its durable part (the
``Snapshot`` of coordinator/share/partition.py, encoded as the value of a ``__share_group_state``
record: coordinator/share/records.py) is one row of ``oncelog_share_state``, keyed by (group,
topic id, partition), written by that leader **fenced by its leader epoch**: ``write`` checks, in
the same transaction and with the partition's row locked ``FOR SHARE``, that
``oncelog_partition`` still names this broker leader at the epoch the state was loaded at. A
leadership change updates that row, so it waits for a write in progress and every later write of
the deposed leader is refused (NOT_LEADER_OR_FOLLOWER): the new leader, which loads the row after
its leadership is committed, never misses an acknowledgement that was answered, and no stale
leader overwrites what it wrote. A group's configs (``share.auto.offset.reset`` …) are one row of
``oncelog_share_config`` (any broker writes them: IncrementalAlterConfigs goes to any broker).

Synchronous, on a ``StoreConnection``; the share coordinator calls it from a worker thread
(``asyncio.to_thread``), one call at a time.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from oncelog.protocol.errors import NotLeaderOrFollower

__all__ = ["ConfigRow", "DDL", "SnapshotRow", "StoreShareState"]

DDL = """
CREATE TABLE IF NOT EXISTS oncelog_share_state (
    group_id     text    NOT NULL,
    topic_id     uuid    NOT NULL,
    partition    integer NOT NULL,
    leader_epoch integer NOT NULL,
    state        bytea   NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition)
);

CREATE TABLE IF NOT EXISTS oncelog_share_config (
    group_id text  PRIMARY KEY,
    configs  jsonb NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One share partition's state (``state`` None: delete it), written by the leader of
    ``topic``-``partition`` at ``leader_epoch``."""

    group_id: str
    topic_id: uuid.UUID
    topic: str
    partition: int
    leader_epoch: int
    state: bytes | None


@dataclass(frozen=True, slots=True)
class ConfigRow:
    group_id: str
    configs: dict[str, str] | None  # None: the group has none any more


class StoreShareState:
    """See the module docstring. ``conn``: a ``StoreConnection`` of its own."""

    def __init__(self, conn: Any, node_id: int) -> None:
        self.conn = conn
        self.node_id = node_id

    def load(self, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes | None:
        """The share partition's state as last written (None: none)."""
        rows = self.conn.query("SELECT state FROM oncelog_share_state WHERE group_id = %s AND topic_id = %s "
                               "AND partition = %s", (group_id, topic_id, partition))
        return bytes(rows[0][0]) if rows else None

    def load_configs(self, group_id: str) -> dict[str, str]:
        rows = self.conn.query("SELECT configs FROM oncelog_share_config WHERE group_id = %s", (group_id,))
        return {str(k): str(v) for k, v in rows[0][0].items()} if rows else {}

    def write(self, rows: Sequence[SnapshotRow | ConfigRow]) -> None:
        """Write ``rows`` in one transaction, all or nothing. Raises NotLeaderOrFollower when a
        snapshot's partition is no longer led by this broker at its epoch (nothing is written),
        StoreUnavailable when the store fails."""
        with self.conn.transaction() as c:
            fenced: set[tuple[str, int, int]] = set()
            for r in rows:
                if isinstance(r, SnapshotRow) and (r.topic, r.partition, r.leader_epoch) not in fenced:
                    ok = c.execute("SELECT 1 FROM oncelog_partition WHERE topic = %s AND partition = %s "
                                   "AND leader_broker = %s AND leader_epoch = %s FOR SHARE",
                                   (r.topic, r.partition, self.node_id, r.leader_epoch)).fetchall()
                    if not ok:
                        raise NotLeaderOrFollower(f"{r.topic}-{r.partition}: this broker no longer leads it at "
                                                  f"epoch {r.leader_epoch}: its share state is not written")
                    fenced.add((r.topic, r.partition, r.leader_epoch))
            for r in rows:
                if isinstance(r, SnapshotRow):
                    if r.state is None:
                        c.execute("DELETE FROM oncelog_share_state WHERE group_id = %s AND topic_id = %s "
                                  "AND partition = %s", (r.group_id, r.topic_id, r.partition))
                    else:
                        c.execute("INSERT INTO oncelog_share_state (group_id, topic_id, partition, leader_epoch, "
                                  "state) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (group_id, topic_id, partition) "
                                  "DO UPDATE SET leader_epoch = EXCLUDED.leader_epoch, state = EXCLUDED.state",
                                  (r.group_id, r.topic_id, r.partition, r.leader_epoch, r.state))
                elif r.configs is None:
                    c.execute("DELETE FROM oncelog_share_config WHERE group_id = %s", (r.group_id,))
                else:
                    c.execute("INSERT INTO oncelog_share_config (group_id, configs) VALUES (%s, %s::jsonb) "
                              "ON CONFLICT (group_id) DO UPDATE SET configs = EXCLUDED.configs",
                              (r.group_id, json.dumps(r.configs)))

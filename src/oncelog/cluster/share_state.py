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
leader overwrites what it wrote.

Administration (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups of a share group)
is done here by whichever broker receives it (the group's coordinator, which checked the group
has no members), not by the leaders: ``admin_write`` replaces or deletes rows. So that no leader
keeps serving, or writes back, the state it cached before, every row carries a ``version`` drawn
from one sequence (never reused, so a row deleted and created again never repeats a version a
leader may hold): a leader's write names the version it loaded (0: it found no row) and is
refused (``StaleShareState``, nothing written) when the row has another one; ``versions`` lets a
leader check what it caches when a share session opens (share_coordinator.py). A group's configs (``share.auto.offset.reset`` …) are one row of
``oncelog_share_config`` (any broker writes them: IncrementalAlterConfigs goes to any broker).

Synchronous, on a ``StoreConnection``; the share coordinator calls it from a worker thread
(``asyncio.to_thread``), one call at a time.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

from oncelog.protocol.errors import InvalidRecordState, NotLeaderOrFollower

__all__ = ["ConfigRow", "DDL", "SnapshotRow", "StaleShareState", "StoreShareState"]

DDL = """
CREATE TABLE IF NOT EXISTS oncelog_share_state (
    group_id     text    NOT NULL,
    topic_id     uuid    NOT NULL,
    partition    integer NOT NULL,
    leader_epoch integer NOT NULL,
    state        bytea   NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition)
);

ALTER TABLE oncelog_share_state ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0;
CREATE SEQUENCE IF NOT EXISTS oncelog_share_version;

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
    #: the row's version the writer loaded (0: there was no row); None: not checked
    version: int | None = None


class StaleShareState(InvalidRecordState):
    """A leader's write of a share partition whose row changed since it was loaded (an
    administrator altered or deleted it): nothing is written; the leader reads the row again."""


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
        return self.load_versioned(group_id, topic_id, partition)[0]

    def load_versioned(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[bytes | None, int]:
        """The share partition's state as last written and the row's version ((None, 0): none)."""
        rows = self.conn.query("SELECT state, version FROM oncelog_share_state WHERE group_id = %s "
                               "AND topic_id = %s AND partition = %s", (group_id, topic_id, partition))
        return (bytes(rows[0][0]), int(rows[0][1])) if rows else (None, 0)

    def versions(self, group_id: str) -> dict[tuple[uuid.UUID, int], int]:
        """(topic id, partition) -> its row's version, for every share partition of the group."""
        rows = self.conn.query("SELECT topic_id, partition, version FROM oncelog_share_state WHERE group_id = %s",
                               (group_id,))
        return {(r[0], int(r[1])): int(r[2]) for r in rows}

    def load_group(self, group_id: str) -> dict[tuple[uuid.UUID, int], bytes]:
        """(topic id, partition) -> its state, for every share partition of the group."""
        rows = self.conn.query("SELECT topic_id, partition, state FROM oncelog_share_state WHERE group_id = %s",
                               (group_id,))
        return {(r[0], int(r[1])): bytes(r[2]) for r in rows}

    def has_group(self, group_id: str) -> bool:
        """Whether the store has share-partition state or configs of the group."""
        return bool(self.conn.query("SELECT 1 WHERE EXISTS (SELECT 1 FROM oncelog_share_state WHERE group_id = %s) "
                                    "OR EXISTS (SELECT 1 FROM oncelog_share_config WHERE group_id = %s)",
                                    (group_id, group_id)))

    def admin_write(self, group_id: str, states: dict[tuple[uuid.UUID, int], bytes | None], *,
                    whole_group: bool = False) -> None:
        """An administrator's change, in one transaction, of any partition (no leader fencing:
        the caller checked that the group has no members): each share partition of ``states``
        gets its state (None: deleted), each at a new version so that no leader writes over
        it. ``whole_group``: every row of the group goes, its configs too (DeleteGroups)."""
        with self.conn.transaction() as c:
            if whole_group:
                c.execute("DELETE FROM oncelog_share_state WHERE group_id = %s", (group_id,))
                c.execute("DELETE FROM oncelog_share_config WHERE group_id = %s", (group_id,))
            for (tid, p), state in sorted(states.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
                if state is None:
                    c.execute("DELETE FROM oncelog_share_state WHERE group_id = %s AND topic_id = %s "
                              "AND partition = %s", (group_id, tid, p))
                else:
                    c.execute("INSERT INTO oncelog_share_state (group_id, topic_id, partition, leader_epoch, state, "
                              "version) VALUES (%s, %s, %s, -1, %s, nextval('oncelog_share_version')) "
                              "ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET state = EXCLUDED.state, "
                              "version = EXCLUDED.version", (group_id, tid, p, state))

    def config_group_ids(self) -> list[str]:
        """The groups with configs in the store, sorted."""
        rows = self.conn.query("SELECT group_id FROM oncelog_share_config ORDER BY group_id", ())
        return [str(r[0]) for r in rows]

    def load_configs(self, group_id: str) -> dict[str, str]:
        rows = self.conn.query("SELECT configs FROM oncelog_share_config WHERE group_id = %s", (group_id,))
        return {str(k): str(v) for k, v in rows[0][0].items()} if rows else {}

    def write(self, rows: Sequence[SnapshotRow | ConfigRow]) -> dict[tuple[str, uuid.UUID, int], int]:
        """Write ``rows`` in one transaction, all or nothing. Returns each snapshot's new row
        version (0: deleted). Raises NotLeaderOrFollower when a snapshot's partition is no longer
        led by this broker at its epoch, StaleShareState when a snapshot's row is not at the
        version it names (nothing is written either way), StoreUnavailable when the store fails."""
        out: dict[tuple[str, uuid.UUID, int], int] = {}
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
                    key = (r.group_id, r.topic_id, r.partition)
                    out[key] = self._write_snapshot(c, key, r)
                elif r.configs is None:
                    c.execute("DELETE FROM oncelog_share_config WHERE group_id = %s", (r.group_id,))
                else:
                    c.execute("INSERT INTO oncelog_share_config (group_id, configs) VALUES (%s, %s::jsonb) "
                              "ON CONFLICT (group_id) DO UPDATE SET configs = EXCLUDED.configs",
                              (r.group_id, json.dumps(r.configs)))
        return out

    @staticmethod
    def _write_snapshot(c: Any, key: tuple[str, uuid.UUID, int], r: SnapshotRow) -> int:
        """One snapshot row, conditional on its version (when ``r.version`` is set): an UPDATE
        or DELETE of the row at that version, or an INSERT that must not meet a row (version 0),
        so no administrator's write committed meanwhile is overwritten. Returns the new version."""
        nv = "nextval('oncelog_share_version')"
        if r.version is None:
            if r.state is None:
                c.execute("DELETE FROM oncelog_share_state WHERE group_id = %s AND topic_id = %s AND partition = %s", key)
                return 0
            got = c.execute("INSERT INTO oncelog_share_state (group_id, topic_id, partition, leader_epoch, state, "
                            f"version) VALUES (%s, %s, %s, %s, %s, {nv}) ON CONFLICT (group_id, topic_id, partition) "
                            "DO UPDATE SET leader_epoch = EXCLUDED.leader_epoch, state = EXCLUDED.state, "
                            "version = EXCLUDED.version RETURNING version", (*key, r.leader_epoch, r.state)).fetchall()
        elif r.version == 0:
            if r.state is None:
                got = c.execute("SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM oncelog_share_state WHERE group_id = %s "
                                "AND topic_id = %s AND partition = %s)", key).fetchall()
            else:
                got = c.execute("INSERT INTO oncelog_share_state (group_id, topic_id, partition, leader_epoch, state, "
                                f"version) VALUES (%s, %s, %s, %s, %s, {nv}) ON CONFLICT (group_id, topic_id, "
                                "partition) DO NOTHING RETURNING version", (*key, r.leader_epoch, r.state)).fetchall()
        elif r.state is None:
            got = c.execute("DELETE FROM oncelog_share_state WHERE group_id = %s AND topic_id = %s AND partition = %s "
                            "AND version = %s RETURNING 0", (*key, r.version)).fetchall()
        else:
            got = c.execute(f"UPDATE oncelog_share_state SET leader_epoch = %s, state = %s, version = {nv} "
                            "WHERE group_id = %s AND topic_id = %s AND partition = %s AND version = %s "
                            "RETURNING version", (r.leader_epoch, r.state, *key, r.version)).fetchall()
        if not got:
            raise StaleShareState(f"share group {r.group_id}: the state of {r.topic}-{r.partition} was altered or "
                                  f"deleted by an administrator since this leader read it: it is read again")
        return int(got[0][0]) if r.state is not None else 0

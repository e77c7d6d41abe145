"""Partition rows and leader epochs in the store.

``claim`` makes a broker the leader of a partition with the next leader epoch (creating the
partition's row on first use) and returns what the new leader starts from. The epoch only
grows, and an append is accepted only under the current epoch (group_commit.py), so claiming
fences the previous leader at the resource: whatever it still sends is refused.

``rebalance`` is the policy on top: in ONE transaction, serialized with every other rebalance
and claim by ``pg_advisory_xact_lock(REBALANCE_LOCK)``, it reads the registered and live
brokers (liveness on the database's clock, judged after the lock is held) and every partition
with its leader and epoch, asks ``assignment.assign`` what should change, writes the new
leaders with bumped epochs and notifies ``oncelog_metadata`` (a hint; brokers also poll). Any
broker may run it at any time (there is no controller): a second rebalance right after the first
finds nothing to do. Who runs it does not matter (a broker whose session expired may too): the
answer depends only on the store, and it never gives a partition to a broker that is not live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncelog.cluster.assignment import Lead, LeaderChange, assign
from oncelog.cluster.schema import SCHEMA_LOCK
from oncelog.types import TopicPartition

__all__ = ["CURRENT_SQL", "METADATA_CHANNEL", "REBALANCE_LOCK", "Leadership", "Rebalanced", "claim", "current",
           "leaders", "rebalance"]

#: pg_advisory_xact_lock key that serializes rebalances and claims (any broker may run them)
REBALANCE_LOCK = SCHEMA_LOCK + 1
#: the LISTEN/NOTIFY channel a rebalance that changed something notifies
METADATA_CHANNEL = "oncelog_metadata"


@dataclass(frozen=True, slots=True)
class Leadership:
    """A partition as its leader finds it when it takes over."""

    partition_id: int
    topic: str
    partition: int
    leader_broker: int
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int


_COLUMNS = "id, topic, partition, leader_broker, leader_epoch, log_start_offset, log_end_offset"


def claim(conn: Any, topic: str, partition: int, broker_id: int) -> Leadership:
    """Make ``broker_id`` the leader of ``topic``-``partition`` with a bumped epoch (0 for a new
    partition). Commits. ``conn`` is a psycopg connection."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (REBALANCE_LOCK,))
        conn.execute(
            "INSERT INTO oncelog_partition (topic, partition) VALUES (%s, %s) ON CONFLICT (topic, partition) DO NOTHING",
            (topic, partition),
        )
        row = conn.execute(
            f"UPDATE oncelog_partition SET leader_broker = %s, leader_epoch = leader_epoch + 1 "
            f"WHERE topic = %s AND partition = %s RETURNING {_COLUMNS}",
            (broker_id, topic, partition),
        ).fetchone()
    return Leadership(*row)


#: the query ``current`` runs (one parameter: the partition id); its rows make ``Leadership``s
CURRENT_SQL = f"SELECT {_COLUMNS} FROM oncelog_partition WHERE id = %s"


def current(conn: Any, partition_id: int) -> Leadership | None:
    """The partition's row as committed now (None if it does not exist)."""
    row = conn.execute(CURRENT_SQL, (partition_id,)).fetchone()
    return None if row is None else Leadership(*row)


def leaders(conn: Any) -> list[Leadership]:
    """Every partition's row as committed now, in placement (creation) order."""
    return [Leadership(*r) for r in conn.execute(f"SELECT {_COLUMNS} FROM oncelog_partition ORDER BY id").fetchall()]


@dataclass(frozen=True, slots=True)
class Rebalanced:
    """What one rebalance saw and did: the live brokers and the changes it wrote."""

    registered: tuple[int, ...]
    live: tuple[int, ...]
    changes: tuple[LeaderChange, ...]


_APPLY = """
UPDATE oncelog_partition AS p SET leader_broker = c.new_leader, leader_epoch = c.new_epoch
FROM unnest(%s::int8[], %s::int4[], %s::int4[], %s::int4[]) AS c(id, old_epoch, new_leader, new_epoch)
WHERE p.id = c.id AND p.leader_epoch = c.old_epoch
RETURNING p.id
"""


def rebalance(conn: Any) -> Rebalanced:
    """Move leaders to where ``assignment.assign`` wants them, in one transaction (see the
    module docstring). Commits. ``conn`` is a psycopg connection (autocommit or idle). The
    epoch condition of the update is a safety belt: under the lock nothing else changes a
    partition's epoch, so every change is written."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (REBALANCE_LOCK,))
        brokers = conn.execute("SELECT node_id, session_expires > clock_timestamp() FROM oncelog_broker "
                               "ORDER BY node_id").fetchall()
        rows = leaders(conn)
        registered = tuple(b for b, _ in brokers)
        live = tuple(b for b, is_live in brokers if is_live)
        by_tp = {TopicPartition(r.topic, r.partition): r for r in rows}
        changes = assign(registered, live, list(by_tp), {tp: Lead(r.leader_broker, r.leader_epoch)
                                                        for tp, r in by_tp.items()})
        if changes:
            ids = [by_tp[c.tp].partition_id for c in changes]
            written = conn.execute(_APPLY, ([*ids], [c.old_epoch for c in changes], [c.new_leader for c in changes],
                                            [c.new_epoch for c in changes])).fetchall()
            if len(written) != len(changes):
                raise AssertionError(f"rebalance: {len(changes) - len(written)} partitions changed epoch under the lock")
            conn.execute("SELECT pg_notify(%s, %s)", (METADATA_CHANNEL, "leaders"))
    return Rebalanced(registered, live, tuple(changes))

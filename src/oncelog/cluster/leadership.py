"""Partition rows and leader epochs in the store.

``claim`` makes a broker the leader of a partition with the next leader epoch (creating the
partition's row on first use) and returns what the new leader starts from. The epoch only
grows, and an append is accepted only under the current epoch (group_commit.py), so claiming
fences the previous leader at the resource: whatever it still sends is refused. Who may claim
(leases, broker sessions, balancing) is decided above this module; this is the mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CURRENT_SQL", "Leadership", "claim", "current"]


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

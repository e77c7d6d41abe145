"""The outbox drain's statements (issue 31, docs/DATABASE.md; the table and ``oncelog.send`` are
outbox_schema.py's): the committed pending rows of ``oncelog.outbox`` read per partition, oldest
first (broker/database/outbox_drainer.py appends them; the engine's commit deletes them).

Synchronous, on a ``StoreConnection``.
"""

from __future__ import annotations

from typing import Sequence

from oncelog.cluster.connection import StoreConnection

__all__ = ["available", "delete_orphans", "partitions_with_rows", "rows"]

_ROWS = (
    "WITH c AS (SELECT id, sum(size) OVER (ORDER BY id) AS run, row_number() OVER (ORDER BY id) AS n "
    "FROM (SELECT id, size FROM oncelog.outbox WHERE partition_id = %(p)s ORDER BY id LIMIT %(lim)s) x) "
    "SELECT o.id, o.ts, o.key, o.value, o.headers FROM c JOIN oncelog.outbox o ON o.id = c.id "
    "WHERE c.run <= %(bytes)s OR c.n = 1 ORDER BY o.id"
)
_PENDING = ("SELECT p FROM unnest(%s::int8[]) AS p "
            "WHERE EXISTS (SELECT 1 FROM oncelog.outbox WHERE partition_id = p)")
_ORPHANS = ("WITH d AS (DELETE FROM oncelog.outbox o WHERE NOT EXISTS "
            "(SELECT 1 FROM oncelog_partition p WHERE p.id = o.partition_id) RETURNING 1) SELECT count(*) FROM d")


def available(conn: StoreConnection) -> bool:
    """Whether the store has the outbox (schema ``oncelog``: its role may not have been allowed
    to create it, schema.ensure_schema)."""
    return bool(conn.query("SELECT to_regclass('oncelog.outbox') IS NOT NULL")[0][0])


def rows(conn: StoreConnection, partition_id: int, limit: int, max_bytes: int) -> list[tuple]:
    """The partition's oldest pending rows in id order, at most ``limit`` and at most
    ``max_bytes`` of records (at least one row): (id, ts, key, value, headers), bytes as
    psycopg's binary results."""
    return conn.query(_ROWS, {"p": partition_id, "lim": limit, "bytes": max_bytes}, binary=True)


def partitions_with_rows(conn: StoreConnection, partition_ids: Sequence[int]) -> list[int]:
    """Which of ``partition_ids`` have pending rows."""
    return [p for (p,) in conn.query(_PENDING, (list(partition_ids),))]


def delete_orphans(conn: StoreConnection) -> int:
    """Delete the rows of partitions that no longer exist (a topic deleted before they were
    drained); how many."""
    (n,), = conn.query(_ORPHANS)
    return int(n)

"""The group coordinator's statements on the database inbox's tables (issue 31, docs/DATABASE.md;
the tables and ``oncelog.commit_offsets`` are inbox_schema.py's): the group mirror
``oncelog.inbox_group`` the store fences applications against, the pending commits
``oncelog.inbox`` read through by OffsetFetch and drained into ``__consumer_offsets``.

Synchronous, each on a ``StoreConnection`` (broker/database/inbox.py runs the writes on a worker
thread, one at a time); ``PENDING_GROUPS`` is the one statement run on an asynchronous connection.
"""

from __future__ import annotations

from typing import Any, Sequence

from oncelog.cluster.connection import StoreConnection

__all__ = ["PENDING_GROUPS", "MirrorRow", "available", "delete", "fetch", "flag_used", "known_groups", "pending",
           "pending_group_ids", "write_mirror"]

#: (offsets partition, kind, generation, state, members as JSON, group id)
MirrorRow = tuple[int, str, int, str, str, str]

#: which of the group ids of the parameter (a text[]) have pending commits
PENDING_GROUPS = "SELECT DISTINCT group_id FROM oncelog.inbox WHERE group_id = ANY(%s)"

_PENDING = ("SELECT id, topic, partition, next_offset, leader_epoch, metadata, ts FROM oncelog.inbox "
            "WHERE group_id = %s ORDER BY id")
_KNOWN = ("SELECT group_id FROM oncelog.inbox_group WHERE offsets_partition = %s AND uses_inbox "
          "UNION SELECT DISTINCT group_id FROM oncelog.inbox")
_UPDATE = ("UPDATE oncelog.inbox_group SET offsets_partition = %s, kind = %s, generation = %s, state = %s, "
           "members = %s WHERE group_id = %s")
_INSERT = ("INSERT INTO oncelog.inbox_group (offsets_partition, kind, generation, state, members, group_id) "
           "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (group_id) DO NOTHING")
_NONE_BUT = ("UPDATE oncelog.inbox_group SET kind = 'none', generation = -1, state = 'Dead', members = '{}' "
             "WHERE offsets_partition = %s AND kind <> 'none' AND NOT group_id = ANY(%s)")


def available(conn: StoreConnection) -> bool:
    """Whether the store has the inbox (schema ``oncelog`` with ``oncelog.inbox``: its role may
    not have been allowed to create it, schema.ensure_schema)."""
    return bool(conn.query("SELECT to_regclass('oncelog.inbox') IS NOT NULL")[0][0])


def pending(conn: StoreConnection, group_id: str) -> list[tuple]:
    """The group's pending commits in id order: (id, topic, partition, next offset, leader
    epoch, metadata, timestamp)."""
    return conn.query(_PENDING, (group_id,))


def pending_group_ids(conn: StoreConnection) -> list[str]:
    """Every group with pending commits."""
    return [g for (g,) in conn.query("SELECT DISTINCT group_id FROM oncelog.inbox")]


def known_groups(conn: StoreConnection, offsets_partition: int) -> list[str]:
    """The groups of ``offsets_partition`` known to use the inbox (flagged in the mirror), and
    every group with pending commits."""
    return [g for (g,) in conn.query(_KNOWN, (offsets_partition,))]


def write_mirror(conn: StoreConnection, offsets_partition: int, rows: Sequence[MirrorRow], *,
                 replace: bool) -> dict[str, str]:
    """Write the mirror ``rows`` in one transaction, each group under its own savepoint; with
    ``replace``, the partition's other groups become kind 'none' first. Returns the groups the
    store refused (group id -> why, short), which are left out; a broken connection fails them
    all (raises StoreUnavailable)."""
    refused: dict[str, str] = {}

    def upsert(cur: Any, row: MirrorRow) -> None:
        cur.execute(_UPDATE, row)
        if cur.rowcount == 0:
            cur.execute(_INSERT, row)
            if cur.rowcount == 0:  # inserted by another broker meanwhile
                cur.execute(_UPDATE, row)

    with conn.transaction() as raw:
        with raw.cursor() as cur:
            if replace:
                cur.execute(_NONE_BUT, (offsets_partition, [r[-1] for r in rows]))
            for row in rows:
                try:
                    with raw.transaction():  # a savepoint: this group's failure is its own
                        upsert(cur, row)
                except Exception as exc:  # noqa: BLE001 - the store refused this group's row
                    if raw.closed or raw.broken:
                        raise
                    refused[row[-1]] = str(exc).splitlines()[0][:200]
    return refused


def fetch(conn: StoreConnection, group_id: str, check: Sequence[tuple[str, int]]) -> list[tuple]:
    """``oncelog.inbox_fetch``: the group's newest pending commit per partition (topic,
    partition, offset, leader epoch, metadata, timestamp, unstable), ``unstable`` telling, for
    the (topic, partition)s of ``check``, whether an open transaction holds its inbox lock."""
    return conn.query("SELECT * FROM oncelog.inbox_fetch(%s, %s, %s, %s)",
                      (group_id, [t for t, _ in check], [p for _, p in check], bool(check)))


def delete(conn: StoreConnection, ids: Sequence[int]) -> None:
    """Delete the pending commits ``ids`` (drained)."""
    with conn.transaction() as raw:
        raw.execute("DELETE FROM oncelog.inbox WHERE id = ANY(%s)", (list(ids),))


def flag_used(conn: StoreConnection, group_id: str) -> None:
    """Mark the group's mirror row as using the inbox (the next coordinators know it)."""
    with conn.transaction() as raw:
        raw.execute("UPDATE oncelog.inbox_group SET uses_inbox = true WHERE group_id = %s AND NOT uses_inbox",
                    (group_id,))

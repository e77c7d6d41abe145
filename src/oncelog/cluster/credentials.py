"""SCRAM credentials in the cluster store (issue 18): the rows of ``oncelog_scram_credential``
(schema.py), what ``broker/auth/credentials.py`` keeps in a file when embedded.

Rows are ``(username, mechanism, salt, stored_key, server_key, iterations)``. ``lock`` takes
the table lock that serializes alterations (two brokers altering at once); ``replace_user``
writes one user's rows. The validation and the all-or-nothing per user are the broker's
(broker/membership/cluster_credentials.py), which calls these inside one transaction. ``conn`` is a psycopg
connection.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["Row", "lock", "replace_user", "rows"]

Row = tuple[str, str, bytes, bytes, bytes, int]


def rows(conn: Any) -> list[Row]:
    out = conn.execute("SELECT username, mechanism, salt, stored_key, server_key, iterations "
                       "FROM oncelog_scram_credential ORDER BY username, mechanism").fetchall()
    return [(u, m, bytes(s), bytes(st), bytes(sv), int(i)) for u, m, s, st, sv, i in out]


def lock(conn: Any) -> None:
    """Inside a transaction: serialize with every other alteration until it ends."""
    conn.execute("LOCK TABLE oncelog_scram_credential IN SHARE ROW EXCLUSIVE MODE")


def replace_user(conn: Any, user: str, new_rows: Iterable[Row]) -> None:
    """Inside a transaction: ``user``'s rows become ``new_rows`` (none: the user is gone)."""
    conn.execute("DELETE FROM oncelog_scram_credential WHERE username = %s", (user,))
    for r in new_rows:
        conn.execute("INSERT INTO oncelog_scram_credential (username, mechanism, salt, stored_key, server_key, "
                     "iterations) VALUES (%s, %s, %s, %s, %s, %s)", r)

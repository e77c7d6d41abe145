"""SCRAM credentials in the cluster store (issue 18): the table ``oncelog_scram_credential``
(schema.py) holds what ``broker/auth/credentials.py`` keeps in a file when embedded.

``load(conn)`` reads every credential into a ``CredentialStore``; ``alter(conn, ...)`` applies
an AlterUserScramCredentials in one transaction, under a table lock (two brokers altering at
once are serialized), with the same validation as the embedded store: the rows of each user
whose alteration succeeded are replaced. ``conn`` is a psycopg connection in autocommit mode.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.auth.credentials import CredentialStore, ScramCredential
from oncelog.protocol.errors import ErrorCode

__all__ = ["alter", "load"]

_SELECT = "SELECT username, mechanism, salt, stored_key, server_key, iterations FROM oncelog_scram_credential"


def load(conn: Any) -> CredentialStore:
    creds: dict[str, dict[str, ScramCredential]] = {}
    for user, mech, salt, stored, server, iterations in conn.execute(_SELECT).fetchall():
        creds.setdefault(user, {})[mech] = ScramCredential(mech, bytes(salt), bytes(stored), bytes(server), iterations)
    return CredentialStore(creds)


def alter(conn: Any, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
          ) -> dict[str, tuple[ErrorCode, str | None]]:
    with conn.transaction():
        conn.execute("LOCK TABLE oncelog_scram_credential IN SHARE ROW EXCLUSIVE MODE")
        store = load(conn)
        results = store.alter(deletions, upsertions)
        for user, (code, _) in results.items():
            if code != ErrorCode.none:
                continue
            conn.execute("DELETE FROM oncelog_scram_credential WHERE username = %s", (user,))
            for c in store.creds.get(user, {}).values():
                conn.execute("INSERT INTO oncelog_scram_credential (username, mechanism, salt, stored_key, server_key, "
                             "iterations) VALUES (%s, %s, %s, %s, %s, %s)",
                             (user, c.mechanism, c.salt, c.stored_key, c.server_key, c.iterations))
    return results

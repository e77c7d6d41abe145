"""A cluster-mode broker's SCRAM credentials (issue 18): the store's table
(cluster/credentials.py), cached for the SASL logins of the event loop.

``store`` is the cache: SASL sessions read it at each exchange. ``refresh()`` reloads it (at
start, then every second, so a user altered through another broker can log in here within about
a second); ``apply()`` (AlterUserScramCredentials) writes through the store and reloads. Both run
their queries in a worker thread on their own connection, one at a time (an asyncio lock), so
the event loop never waits on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from oncelog.broker.auth.credentials import CredentialStore, ScramCredential
from oncelog.cluster import credentials as store_credentials
from oncelog.cluster.connection import StoreConnection
from oncelog.protocol.errors import ErrorCode
from oncelog.storable import unstorable

__all__ = ["StoreUserCredentials", "alter", "load"]

log = logging.getLogger(__name__)


def load(conn: Any) -> CredentialStore:
    """Every credential of the store's table."""
    creds: dict[str, dict[str, ScramCredential]] = {}
    for user, mech, salt, stored, server, iterations in store_credentials.rows(conn):
        creds.setdefault(user, {})[mech] = ScramCredential(mech, salt, stored, server, iterations)
    return CredentialStore(creds)


def alter(conn: Any, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
          ) -> dict[str, tuple[ErrorCode, str | None]]:
    """AlterUserScramCredentials on the store, in one transaction under the table lock, with the
    embedded store's validation (``CredentialStore.alter``): each user whose alteration
    succeeded has its rows replaced. Used by the broker and by ``oncelog users --store``.
    A user name the store cannot hold (a NUL character, storable.py) answers
    UNACCEPTABLE_CREDENTIAL for that user and never reaches the store (issue 26 row 11)."""
    refused: dict[str, tuple[ErrorCode, str | None]] = {}
    for user in [d[0] for d in deletions] + [u[0] for u in upsertions]:
        why = unstorable(user)
        if why is not None:
            refused[user] = (ErrorCode.unacceptable_credential, f"the user name {why}")
    order = list(dict.fromkeys([d[0] for d in deletions] + [u[0] for u in upsertions]))
    deletions = [d for d in deletions if d[0] not in refused]
    upsertions = [u for u in upsertions if u[0] not in refused]
    with conn.transaction():
        store_credentials.lock(conn)
        store = load(conn)
        results = store.alter(deletions, upsertions) if deletions or upsertions else {}
        results = {user: refused[user] if user in refused else results[user] for user in order}
        for user, (code, _) in results.items():
            if code == ErrorCode.none:
                store_credentials.replace_user(conn, user, [
                    (user, c.mechanism, c.salt, c.stored_key, c.server_key, c.iterations)
                    for c in store.creds.get(user, {}).values()])
    return results


class StoreUserCredentials:
    def __init__(self, connect: Callable[[], Any], node_id: int) -> None:
        self.conn = StoreConnection(connect, f"node {node_id} reads credentials")
        self.store = CredentialStore()
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Reload the cache. Raises StoreUnavailable (or psycopg's error) when the store is out
        of reach; the cache is kept then."""
        async with self._lock:
            self.store = await asyncio.to_thread(lambda: load(self.conn.raw()))

    async def refresh_quietly(self) -> None:
        """``refresh`` for the periodic job: a store out of reach is one warning (the broker's
        log filter folds repeats), and logins go on with the last credentials read."""
        try:
            await self.refresh()
        except Exception as exc:  # noqa: BLE001 - StoreUnavailable, psycopg.OperationalError
            self.conn.drop()
            log.warning("cannot refresh SCRAM credentials from the store (the last ones read stay in force): %s", exc)

    async def apply(self, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int, bytes, bytes]]
                    ) -> dict[str, tuple[ErrorCode, str | None]]:
        async with self._lock:
            def work() -> tuple[dict[str, tuple[ErrorCode, str | None]], CredentialStore]:
                conn = self.conn.raw()
                return alter(conn, deletions, upsertions), load(conn)

            results, self.store = await asyncio.to_thread(work)
        return results

    def close(self) -> None:
        self.conn.close()

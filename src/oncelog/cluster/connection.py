"""A store connection that comes back: one psycopg connection for one thread, re-opened after
PostgreSQL restarts or the network breaks.

``query`` runs a read and retries it once on a new connection when the old one turns out to be
broken (a read is safe to repeat); any other failure, and a second one, raise
``StoreUnavailable`` (retriable). ``transaction()`` yields the connection inside a transaction
and never retries: the caller decides (a write's outcome may be unknown). After a failure the
connection is dropped and the next call opens a new one, so the broker resumes by itself once
the store is back. Not thread-safe: one per thread (the committer has its own).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from oncelog.cluster.errors import StoreUnavailable
from oncelog.protocol.errors import KafkaError

__all__ = ["StoreConnection", "connector"]


def connector(dsn: str) -> Callable[[], Any]:
    """A function opening a new autocommit psycopg connection to ``dsn`` (bounded connect)."""
    import psycopg  # the 'cluster' extra

    return lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=10)


class StoreConnection:
    def __init__(self, connect: Callable[[], Any], what: str = "store") -> None:
        """``connect`` returns a new psycopg connection in autocommit mode."""
        self._connect = connect
        self._what = what
        self._conn: Any = None

    def raw(self) -> Any:
        """The open connection (opened now if need be); raises StoreUnavailable."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.drop()
            try:
                self._conn = self._connect()
            except Exception as exc:
                raise StoreUnavailable(f"{self._what}: cannot connect: {exc}") from None
        return self._conn

    def query(self, sql: str, params: Any = None, *, binary: bool = False) -> list[tuple]:
        """Run a read and return its rows; retried once on a fresh connection if the
        connection was broken."""
        for attempt in (1, 2):
            conn = self.raw()
            try:
                return conn.execute(sql, params, binary=binary).fetchall()
            except Exception as exc:
                broken = conn.closed or conn.broken
                if broken:
                    self.drop()
                if broken and attempt == 1:
                    continue
                raise StoreUnavailable(f"{self._what}: read failed: {exc}") from None
        raise AssertionError("unreachable")

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """The connection inside a transaction (committed when the block ends). KafkaErrors
        raised in the block pass through (the transaction is rolled back); database failures
        become StoreUnavailable. Never retried."""
        conn = self.raw()
        try:
            with conn.transaction():
                yield conn
        except KafkaError:
            raise
        except Exception as exc:
            if conn.closed or conn.broken:
                self.drop()
            raise StoreUnavailable(f"{self._what}: transaction failed: {exc}") from None

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    close = drop

"""A cluster-mode 'broker' on a test database, for the tests of cluster/ (issue 15): a reader
connection, a group committer, and partitions it leads; a broker session; a bounded wait."""

from __future__ import annotations

import time

import psycopg
import pytest

from oncelog.cluster import leadership, schema
from oncelog.cluster.connection import StoreConnection
from oncelog.storage.engines.postgres.group_commit import GroupCommitter
from oncelog.cluster.membership import BrokerSession, SessionConfig
from oncelog.storage.engines.postgres.log import PgPartitionLog
from oncelog.storage.config import LogConfig

CONFIG = LogConfig(retention_ms=-1)


class Store:
    """One 'broker' on a test database: a reader connection and a group committer."""

    def __init__(self, dsn: str, broker_id: int = 1, *, start: bool = True, linger_s: float = 0.0) -> None:
        self.dsn = dsn
        self.broker_id = broker_id
        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        schema.ensure_schema(self.conn)
        self.reader = StoreConnection(self.connect, f"broker {broker_id}")
        self.committer = GroupCommitter(self.connect, linger_s=linger_s)
        if start:
            self.committer.start()

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)

    def lead(self, topic: str, partition: int = 0, config: LogConfig = CONFIG) -> PgPartitionLog:
        lead = leadership.claim(self.conn, topic, partition, self.broker_id)
        return PgPartitionLog(self.reader, self.committer, lead, config, append_timeout_s=30)

    def open_assigned(self, topic: str, partition: int = 0, config: LogConfig = CONFIG) -> PgPartitionLog:
        """The log of a partition a rebalance gave this broker, under the stored leader epoch."""
        (lead,) = [r for r in leadership.leaders(self.conn) if (r.topic, r.partition) == (topic, partition)]
        assert lead.leader_broker == self.broker_id, lead
        return PgPartitionLog(self.reader, self.committer, lead, config, append_timeout_s=30)

    def close(self) -> None:
        self.committer.close(30)
        self.reader.close()
        self.conn.close()


class LosesAnswer:
    """A real connection whose next statement reaches PostgreSQL (``runs``) or not, and whose
    answer is then lost with the connection, as when a network or server fails mid-COMMIT."""

    def __init__(self, conn: psycopg.Connection, runs: bool) -> None:
        self.conn, self.runs, self.broken = conn, runs, False

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def execute(self, query, params=None):
        if self.runs:
            self.conn.execute(query, params).fetchall()
        self.conn.close()
        self.broken = True
        raise psycopg.OperationalError("server closed the connection unexpectedly (test)")

    def close(self) -> None:
        self.conn.close()


def loses_first_answer(store: Store, runs: bool) -> tuple:
    """A connect function for ``store``'s database whose first connection loses its first answer
    (``LosesAnswer``, the statement reaching PostgreSQL when ``runs``), and the list of the
    connections it made."""
    connects: list = []

    def connect():
        conn = store.connect()
        connects.append(conn)
        return LosesAnswer(conn, runs) if len(connects) == 1 else conn

    return connect, connects


def session(dsn: str, node: int, timeout_ms: int = 30_000, **kw) -> BrokerSession:
    """A broker session for node ``node`` (127.0.0.1:9000+node), not registered yet."""
    store = StoreConnection(lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=10), f"node {node}")
    return BrokerSession(store, node, "127.0.0.1", 9000 + node,
                         config=SessionConfig(timeout_ms, max(1, timeout_ms // 5)), **kw)


def wait_until(predicate, timeout_s: float = 15.0, step_s: float = 0.05, what: str = "condition") -> float:
    """Poll ``predicate`` at most timeout_s / step_s times; the seconds it took. Fails the test on timeout."""
    start = time.monotonic()
    for _ in range(int(timeout_s / step_s) + 1):
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            break
        time.sleep(step_s)
    pytest.fail(f"{what} not reached in {timeout_s} s")

"""The PostgreSQL test fixture itself (tests/pgserver.py): a real server, databases per test,
and a crash restart (``pg_ctl stop -m immediate``) that keeps committed data."""

from __future__ import annotations

import psycopg


def test_database_per_test_and_immediate_restart_keeps_committed_rows(pg_server, pg_dsn) -> None:
    assert pg_dsn.startswith(f"postgresql://{pg_server.user.name}@127.0.0.1:{pg_server.port}/")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        conn.execute("CREATE TABLE t (k int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
    pg_server.restart("immediate")  # a crash: no checkpoint, WAL replay on start
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [(1, "one"), (2, "two")]
    pg_server.restart("fast")
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_each_test_gets_an_empty_database(pg_dsn) -> None:
    with psycopg.connect(pg_dsn) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)

"""The database outbox into diskless topics (issue 31 on issue 29's topics; docs/DATABASE.md,
docs/DISKLESS.md): an application's PostgreSQL transaction calls ``oncelog.db.send`` for a
diskless topic; real broker processes drain the pending rows into the object writer, whose ONE
commit inserts the batch's coordinates and deletes the rows. A committed transaction's records
are read by a confluent-kafka read_committed consumer exactly once, in the order sent; a rolled
back one's never; a broker SIGKILLed while draining leaves every committed row exactly once
after its restart. Real SeaweedFS, real PostgreSQL; every wait is bounded; traffic on 127.0.0.1."""

from __future__ import annotations

import collections
import threading
import time
import uuid
from pathlib import Path

import psycopg

import kafka_clients as kc
from cluster_procs import read_from_start
from dl_cluster import diskless_brokers, restart_hard
from oncelog import db


def _app_role(dsn: str, topic_prefix: str) -> str:
    """A login role allowed to call ``oncelog.send`` and Write to topics starting with
    ``topic_prefix``, with a table 'ledger' it may write: its DSN."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute(f"GRANT USAGE ON SCHEMA oncelog TO {role}")
        c.execute(f"GRANT EXECUTE ON FUNCTION oncelog.send(text, bytea, bytea, jsonb, integer) TO {role}")
        c.execute("CREATE TABLE IF NOT EXISTS ledger (id int PRIMARY KEY, note text)")
        c.execute(f"GRANT SELECT, INSERT ON ledger TO {role}")
        c.execute("INSERT INTO oncelog_acl VALUES (2, %s, 4, %s, '*', 4, 3)", (topic_prefix, f"User:{role}"))
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["user"] = role
    return psycopg.conninfo.make_conninfo(**info)


def _wait_leaders(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(150):
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and \
                all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} has no leaders")


def _pending(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM oncelog.outbox").fetchone()[0]


def _wait_drained(dsn: str, timeout: float = 60.0) -> int:
    """The pending rows left once the outbox is empty or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while (n := _pending(dsn)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return n


def test_committed_rows_become_diskless_records_once_and_rolled_back_never(pg_dsn: str, tmp_path: Path,
                                                                          seaweed) -> None:
    with diskless_brokers(pg_dsn, tmp_path, seaweed, nodes=(1, 2), prefix="ob1") as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, "dl-orders", 3, {"diskless.enable": "true"})
        _wait_leaders(bootstrap, "dl-orders", 3)
        app_dsn = _app_role(pg_dsn, "dl-orders")
        sent: dict[bytes, int] = {}  # committed value -> the partition send chose
        with psycopg.connect(app_dsn) as conn:
            for i in range(20):
                with conn.transaction(force_rollback=i % 2 == 1):
                    conn.execute("INSERT INTO ledger VALUES (%s, 'order')", (i,))
                    parts = [db.send(conn, "dl-orders", f"o{i}-{j}", key=f"o{i}", headers={"seq": str(j)})
                             for j in range(4)]
                if i % 2 == 0:
                    sent.update({f"o{i}-{j}".encode(): p for j, p in enumerate(parts)})
        assert _wait_drained(pg_dsn) == 0, "rows sent to a diskless topic stay pending"
        out = read_from_start(bootstrap, "dl-orders", 3, lambda o: len(o) >= len(sent), group="g-dl",
                              isolation="read_committed", timeout=60, settle=2.0)
        values = [v for _, _, v in out]
        assert collections.Counter(values) == collections.Counter(sent.keys())  # exactly once, nothing else
        assert {v: p for p, _, v in out} == sent  # on the partition send answered
        pos = {v: (p, o) for p, o, v in out}
        for i in range(0, 20, 2):  # in the order sent within the transaction
            got = [pos[f"o{i}-{j}".encode()] for j in range(4)]
            assert got == sorted(got), (i, got)
        with psycopg.connect(pg_dsn) as c:
            assert [r[0] for r in c.execute("SELECT id FROM ledger ORDER BY id")] == list(range(0, 20, 2))
            # the records went the diskless way: coordinates in oncelog_dl_batch, bytes in objects
            n, objects = c.execute(
                "SELECT coalesce(sum(b.record_count), 0), count(DISTINCT b.object_id) FROM oncelog_dl_batch b "
                "JOIN oncelog_partition p ON p.id = b.partition_id WHERE p.topic = 'dl-orders'").fetchone()
            assert n == len(sent) and objects >= 1
            assert c.execute("SELECT count(*) FROM oncelog_batch b JOIN oncelog_partition p "
                             "ON p.id = b.partition_id WHERE p.topic = 'dl-orders'").fetchone()[0] == 0


def test_a_broker_killed_while_draining_leaves_every_committed_row_once(pg_dsn: str, tmp_path: Path,
                                                                       seaweed) -> None:
    topic = "dl-kill"
    with diskless_brokers(pg_dsn, tmp_path, seaweed, nodes=(1, 2), prefix="ob2") as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, topic, 4, {"diskless.enable": "true"})
        _wait_leaders(bootstrap, topic, 4)
        app_dsn = _app_role(pg_dsn, topic)
        committed: list[int] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def writer() -> None:
            try:
                with psycopg.connect(app_dsn) as conn:
                    for i in range(300):
                        if stop.is_set():
                            return
                        with conn.transaction(force_rollback=i % 10 == 9):
                            conn.execute("INSERT INTO ledger VALUES (%s, 'w')", (i,))
                            db.send(conn, topic, f"{i}-0", key=f"k{i}")
                            db.send(conn, topic, f"{i}-1", key=f"k{i}")
                        if i % 10 != 9:
                            committed.append(i)
                        time.sleep(0.01)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        t = threading.Thread(target=writer)
        t.start()
        try:
            deadline = time.monotonic() + 30
            while len(committed) < 60 and time.monotonic() < deadline:
                time.sleep(0.05)
            restart_hard(procs[0])  # SIGKILLed while it drains its partitions, then started again
            t.join(120)
        finally:
            stop.set()
            t.join(30)
        assert not errors, errors
        assert len(committed) == 270
        assert _wait_drained(pg_dsn, 90) == 0, "committed rows left pending after the restart"
        expected = {f"{i}-{j}".encode() for i in committed for j in (0, 1)}
        out = read_from_start(bootstrap, topic, 4, lambda o: len({v for _, _, v in o}) >= len(expected),
                              group="g-dl-kill", isolation="read_committed", timeout=120, settle=2.0)
        values = collections.Counter(v for _, _, v in out)
        missing = expected - set(values)
        assert not missing, f"{len(missing)} committed record(s) missing, e.g. {sorted(missing)[:5]}"
        dups = {v: n for v, n in values.items() if n > 1}
        assert not dups, f"duplicated: {list(dups.items())[:5]}"
        assert set(values) == expected  # nothing of the rolled-back transactions
        pos = {v: (p, o) for p, o, v in out}
        for i in committed:
            a, b = pos[f"{i}-0".encode()], pos[f"{i}-1".encode()]
            assert a[0] == b[0] and a[1] < b[1], (i, a, b)
        with psycopg.connect(pg_dsn) as c:
            assert sorted(r[0] for r in c.execute("SELECT id FROM ledger")) == sorted(committed)

"""The database outbox end to end (issue 31, docs/DATABASE.md): an application's own
PostgreSQL transaction writes its rows and calls ``oncelog.send``; three real broker processes
drain the pending rows; confluent-kafka consumers (read_committed and read_uncommitted) read
exactly the committed transactions' records, once each, in the order sent, on the partition
Kafka's murmur2 partitioner picks; a transaction left open holds nothing the others wait on;
brokers SIGKILLed while draining and applications SIGKILLed before COMMIT lose and duplicate
nothing. Every wait is bounded; all traffic is on 127.0.0.1."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

import kafka_clients as kc
from cluster_procs import brokers, read_from_start
from oncelog import db
from oncelog.process import BrokerProcess

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2, 3)) as procs:
        yield procs


def _app_role(dsn: str, topic_prefix: str) -> tuple[str, str]:
    """A login role with the outbox granted, a table 'ledger' it may write, and an ACL allowing
    its principal to Write to topics starting with ``topic_prefix``: (role, its DSN)."""
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
    return role, psycopg.conninfo.make_conninfo(**info)


def _wait_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(150):
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and \
                all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} has no leaders")


def _murmur2_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """The partition a confluent-kafka producer with Kafka's (Java) default partitioner picks."""
    from confluent_kafka import Producer

    got: dict[bytes, int] = {}
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for k in keys:
        p.produce(f"{topic}-probe", key=k, value=b"x", on_delivery=lambda err, m: got.__setitem__(m.key(), m.partition()))
    assert p.flush(30) == 0
    return got


def test_records_are_readable_iff_the_application_transaction_commits(cluster: list[BrokerProcess],
                                                                       pg_dsn: str) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster)
    kc.create_topic("confluent", bootstrap, "orders", 3)
    kc.create_topic("confluent", bootstrap, "orders-probe", 3)
    _wait_topic(bootstrap, "orders", 3)
    _wait_topic(bootstrap, "orders-probe", 3)
    _role, app_dsn = _app_role(pg_dsn, "orders")
    sent: dict[bytes, int] = {}  # committed value -> partition oncelog.send chose
    with psycopg.connect(app_dsn) as conn:
        for i in range(20):
            with conn.transaction(force_rollback=i % 2 == 1):
                conn.execute("INSERT INTO ledger VALUES (%s, 'order')", (i,))
                parts = [db.send(conn, "orders", f"o{i}-{j}", key=f"o{i}", headers={"seq": str(j)})
                         for j in range(3)]
            if i % 2 == 0:
                sent.update({f"o{i}-{j}".encode(): p for j, p in enumerate(parts)})
        with pytest.raises(psycopg.errors.UndefinedObject):
            with conn.transaction():
                conn.execute("INSERT INTO ledger VALUES (100, 'refused')")
                db.send(conn, "orders", "r0", key="r")
                db.send(conn, "no-such-topic", "r1")  # refused: the whole transaction goes
        # a transaction left open with a pending record holds nothing the others wait on
        with psycopg.connect(app_dsn) as long_conn:
            long_conn.execute("INSERT INTO ledger VALUES (200, 'long')")
            db.send(long_conn, "orders", "long-0", key="o0")  # same partition as o0-*
            with conn.transaction():
                db.send(conn, "orders", "after-long", key="o0")
            sent[b"after-long"] = sent[b"o0-0"]
            out = read_from_start(bootstrap, "orders", 3, lambda o: b"after-long" in {v for _, _, v in o},
                                  group="g-open", isolation="read_committed", timeout=60, settle=0.5)
            assert b"after-long" in {v for _, _, v in out}, "a committed record waited for an open transaction"
            assert b"long-0" not in {v for _, _, v in out}
            long_conn.rollback()
    # the partitions chosen are the Java client's (murmur2)
    probe = _murmur2_partitions(bootstrap, "orders", [f"o{i}".encode() for i in range(0, 20, 2)])
    for v, p in sent.items():
        key = v.split(b"-")[0] if v != b"after-long" else b"o0"
        assert probe[key] == p, (v, p, probe[key])
    with psycopg.connect(pg_dsn) as c:
        assert [r[0] for r in c.execute("SELECT id FROM ledger ORDER BY id")] == list(range(0, 20, 2))
    for isolation in ("read_committed", "read_uncommitted"):
        out = read_from_start(bootstrap, "orders", 3, lambda o: len(o) >= len(sent), group=f"g-{isolation}",
                              isolation=isolation, timeout=60, settle=2.0)
        values = [v for _, _, v in out]
        assert collections.Counter(values) == collections.Counter(sent.keys()), isolation  # exactly once, nothing else
        assert {v: p for p, _, v in out} == sent  # on the partition send answered
        by_offset = {v: (p, o) for p, o, v in out}
        for i in range(0, 20, 2):  # in the order sent within the transaction
            assert [by_offset[f"o{i}-{j}".encode()] for j in range(3)] == sorted(
                by_offset[f"o{i}-{j}".encode()] for j in range(3))
        assert by_offset[b"o0-2"] < by_offset[b"after-long"]
    with psycopg.connect(pg_dsn) as c:
        assert c.execute("SELECT count(*) FROM oncelog.outbox").fetchone()[0] == 0  # every row drained
    # keys, headers and producer fields as a client sees them
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-headers", "enable.auto.commit": False})
    c.assign([TopicPartition("orders", sent[b"o4-1"], 0)])
    try:
        found = None
        deadline = time.monotonic() + 30
        while found is None and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None and m.value() == b"o4-1":
                    found = m
        assert found is not None
        assert found.key() == b"o4" and found.headers() == [("seq", b"1")]
        assert abs(found.timestamp()[1] / 1000 - time.time()) < 600
    finally:
        c.close()


_APP_KILLED = """
import sys, time, psycopg
from oncelog import db
conn = psycopg.connect(sys.argv[1])
conn.execute("INSERT INTO ledger VALUES (%s, 'killed')", (int(sys.argv[2]),))
db.send(conn, sys.argv[3], "killed-" + sys.argv[2], key="k" + sys.argv[2])
print("ready", flush=True)
time.sleep(120)
"""


def test_brokers_and_applications_killed_while_the_outbox_drains(cluster: list[BrokerProcess], pg_dsn: str) -> None:
    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic = "kill"
    kc.create_topic("confluent", bootstrap, topic, 6)
    _wait_topic(bootstrap, topic, 6)
    _role, app_dsn = _app_role(pg_dsn, topic)
    committed: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            with psycopg.connect(app_dsn) as conn:
                for i in range(1000, 1400):
                    if stop.is_set():
                        return
                    with conn.transaction():
                        conn.execute("INSERT INTO ledger VALUES (%s, 'w')", (i,))
                        db.send(conn, topic, f"{i}-0", key=f"k{i}")
                        db.send(conn, topic, f"{i}-1", key=f"k{i}")
                    committed.append(i)
                    time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    try:
        # applications SIGKILLed between their writes and COMMIT
        apps = [subprocess.Popen([sys.executable, "-c", _APP_KILLED, app_dsn, str(n), topic], stdout=subprocess.PIPE)
                for n in (1, 2)]
        for a in apps:
            assert a.stdout is not None and a.stdout.readline().strip() == b"ready"
        for a in apps:
            a.kill()
            a.wait(30)
        deadline = time.monotonic() + 30
        while len(committed) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster[0].kill()  # while it drains its partitions
        deadline = time.monotonic() + 30
        mark = len(committed)
        while len(committed) < mark + 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster[1].kill()
        time.sleep(1.0)
        cluster[0].start(timeout=60)
        t.join(120)
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    assert len(committed) == 400
    expected = {f"{i}-{j}".encode() for i in committed for j in (0, 1)}
    boot = ",".join(b.bootstrap for b in (cluster[0], cluster[2]))
    out = read_from_start(boot, topic, 6, lambda o: len({v for _, _, v in o}) >= len(expected),
                          group="g-kill", isolation="read_committed", timeout=120, settle=2.0)
    values = collections.Counter(v for _, _, v in out)
    missing = expected - set(values)
    assert not missing, f"{len(missing)} committed record(s) missing, e.g. {sorted(missing)[:5]}"
    dups = {v: n for v, n in values.items() if n > 1}
    assert not dups, f"duplicated: {list(dups.items())[:5]}"
    assert set(values) == expected  # nothing of the killed applications, nothing else
    pos = {v: (p, o) for p, o, v in out}
    for i in committed:
        a, b = pos[f"{i}-0".encode()], pos[f"{i}-1".encode()]
        assert a[0] == b[0] and a[1] < b[1], (i, a, b)
    with psycopg.connect(pg_dsn) as c:
        assert sorted(r[0] for r in c.execute("SELECT id FROM ledger")) == sorted(committed)
        assert c.execute("SELECT count(*) FROM oncelog.outbox").fetchone()[0] == 0


def test_rows_committed_while_no_broker_listens_are_drained_by_the_poll(pg_dsn: str, tmp_path: Path) -> None:
    """The notification of a COMMIT made while no broker listened is lost; the poll drains it."""
    from oncelog.cluster import schema, topics

    with psycopg.connect(pg_dsn, autocommit=True) as c:
        schema.ensure_schema(c)
        topics.create(c, "late", 2)
    _role, app_dsn = _app_role(pg_dsn, "late")
    with psycopg.connect(app_dsn) as conn, conn.transaction():
        for i in range(5):
            db.send(conn, "late", f"late-{i}", key="same")
    with brokers(pg_dsn, tmp_path, SMALL, (1,)) as procs:
        out = read_from_start(procs[0].bootstrap, "late", 2, lambda o: len(o) >= 5, group="g-late",
                              isolation="read_committed", timeout=60, settle=1.0)
    assert [v for _, _, v in sorted(out)] == [f"late-{i}".encode() for i in range(5)]


def test_postgresql_crash_while_the_outbox_drains(pg_server, pg_dsn: str, tmp_path: Path) -> None:
    """PostgreSQL crashes (immediate stop: no checkpoint, WAL replay) while applications commit
    and the brokers drain: every row the database kept has its records exactly once, and no
    record exists without its row (an application whose COMMIT's answer was lost cannot know;
    the database is the truth)."""
    topic = "crash"
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, topic, 4)
        _wait_topic(bootstrap, topic, 4)
        _role, app_dsn = _app_role(pg_dsn, topic)
        attempted: list[int] = []
        stop = threading.Event()

        def writer() -> None:
            i = 5000
            while not stop.is_set() and i < 5300:
                try:
                    with psycopg.connect(app_dsn, connect_timeout=5) as conn:
                        while not stop.is_set() and i < 5300:
                            attempted.append(i)
                            with conn.transaction():
                                conn.execute("INSERT INTO ledger VALUES (%s, 'w')", (i,))
                                db.send_many(conn, topic, [(f"{i}-{j}", f"k{i}") for j in range(3)])
                            i += 1
                            time.sleep(0.01)
                except psycopg.OperationalError:
                    i += 1  # that transaction's outcome is unknown: the ledger says
                    time.sleep(0.2)

        t = threading.Thread(target=writer)
        t.start()
        try:
            deadline = time.monotonic() + 30
            while len(attempted) < 80 and time.monotonic() < deadline:
                time.sleep(0.05)
            pg_server.restart("immediate")
            t.join(180)
        finally:
            stop.set()
            t.join(30)
        assert len(attempted) >= 250
        with psycopg.connect(pg_dsn) as c:
            kept = sorted(r[0] for r in c.execute("SELECT id FROM ledger"))
        assert len(kept) >= 200
        expected = {f"{i}-{j}".encode() for i in kept for j in range(3)}
        out = read_from_start(bootstrap, topic, 4, lambda o: len({v for _, _, v in o}) >= len(expected),
                              group="g-crash", isolation="read_committed", timeout=120, settle=2.0)
        values = collections.Counter(v for _, _, v in out)
        assert set(values) == expected, (sorted(expected - set(values))[:5], sorted(set(values) - expected)[:5])
        assert max(values.values()) == 1, [v for v, n in values.items() if n > 1][:5]
        pos = {v: (p, o) for p, o, v in out}
        for i in kept:
            assert pos[f"{i}-0".encode()] < pos[f"{i}-1".encode()] < pos[f"{i}-2".encode()]
        deadline = time.monotonic() + 30
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            while c.execute("SELECT count(*) FROM oncelog.outbox").fetchone()[0] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert c.execute("SELECT count(*) FROM oncelog.outbox").fetchone()[0] == 0

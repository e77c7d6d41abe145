"""The database inbox end to end (issue 31, docs/DATABASE.md): an application reads with a real
Kafka consumer in a consumer group of cluster-mode brokers, and writes its rows and the group's
offsets (``oncelog.commit_offsets``) in ONE transaction of the store's PostgreSQL database.
OffsetFetch from any client answers the commit right after COMMIT; a rolled-back transaction
commits nothing; a zombie (a member id or generation the group left behind) is refused inside
the application's transaction; an open transaction makes a read_committed consumer's
OffsetFetch wait (UNSTABLE_OFFSET_COMMIT); commits end up in ``__consumer_offsets`` and survive
the brokers' restart; applications (confluent-kafka, kafka-python) SIGKILLed between their rows
and COMMIT and restarted leave every record's row exactly once. Every wait is bounded; all
traffic is on 127.0.0.1."""

from __future__ import annotations

import collections
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest

import kafka_clients as kc
from cluster_procs import brokers
from oncelog import db
from oncelog.cluster.inbox_schema import COMMIT_SIGNATURE
from oncelog.process import BrokerProcess

SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
         "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def cluster(pg_dsn: str, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    with brokers(pg_dsn, tmp_path, SMALL, (1, 2)) as procs:
        yield procs


def _app_role(dsn: str, group_prefix: str, topic: str) -> str:
    """A login role granted the inbox, a table 'processed' it may write, ACLs allowing its
    principal to Read groups starting with ``group_prefix`` and topic ``topic``: its DSN."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute(f"GRANT USAGE ON SCHEMA oncelog TO {role}")
        c.execute(f"GRANT EXECUTE ON FUNCTION {COMMIT_SIGNATURE} TO {role}")
        c.execute("CREATE TABLE IF NOT EXISTS processed (value text NOT NULL, part int, off bigint)")
        c.execute(f"GRANT SELECT, INSERT ON processed TO {role}")
        c.execute("INSERT INTO oncelog_acl VALUES (3, %s, 4, %s, '*', 3, 3)", (group_prefix, f"User:{role}"))
        c.execute("INSERT INTO oncelog_acl VALUES (2, %s, 3, %s, '*', 3, 3)", (topic, f"User:{role}"))
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["user"] = role
    return psycopg.conninfo.make_conninfo(**info)


def _wait(what: str, cond: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _setup_topic(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    kc.create_topic("confluent", bootstrap, topic, partitions)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        for _ in range(100):
            try:
                p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def _fetched(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as kafka-python's admin client fetches them (OffsetFetch,
    no require_stable)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = admin.list_group_offsets({group: None})[group]
        return {(tp.topic, tp.partition): om.offset for tp, om in got.items()}
    finally:
        admin.close()


def _consumer(bootstrap: str, group: str, topic: str, **extra: Any):  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  **extra})
    c.subscribe([topic])
    return c


def _assigned(c, timeout: float = 60.0) -> list:  # type: ignore[no-untyped-def]
    """Poll ``c`` until it holds partitions (and has read some records): the records read."""
    out: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out.extend(m for m in c.consume(100, 0.5) if m.error() is None)
        if out and c.assignment():
            return out
    raise AssertionError("the consumer got no partitions")


def _refused(conn, kafka_error: str, *args: Any, **kw: Any) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
        with conn.transaction():
            conn.execute("INSERT INTO processed VALUES ('zombie', -1, -1)")
            db.commit_offsets(conn, *args, **kw)
    assert info.value.diag.message_detail == kafka_error, info.value
    assert conn.execute("SELECT count(*) FROM processed WHERE value = 'zombie'").fetchone() == (0,)


def test_offsets_committed_in_the_application_transaction(cluster: list[BrokerProcess], pg_dsn: str) -> None:
    from confluent_kafka import KafkaException, TopicPartition

    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic, group = "fence", "gf-1"
    _setup_topic(bootstrap, topic, 2, 20)
    app_dsn = _app_role(pg_dsn, "gf-", topic)
    a = _consumer(bootstrap, group, topic)
    conn = psycopg.connect(app_dsn, autocommit=True)
    try:
        _assigned(a)
        g, member_a, gen_a = _wait("A's membership", lambda: (m := db.group_metadata(a))[2] >= 0 and m)
        assert g == group and member_a
        # rows and offsets in one transaction; OffsetFetch from another (connected) client
        # answers the commit right after COMMIT, every time
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.list_group_offsets({group: None})
            for i in range(1, 16):
                with conn.transaction():
                    conn.execute("INSERT INTO processed VALUES (%s, 0, %s)", (f"a{i}", i - 1))
                    db.commit_offsets(conn, group, {(topic, 0): i}, member_id=member_a, generation=gen_a)
                got = admin.list_group_offsets({group: None})[group]
                assert {(tp.topic, tp.partition): om.offset for tp, om in got.items()} == {(topic, 0): i}, i
        finally:
            admin.close()
        with conn.transaction():
            db.commit_offsets(conn, group, {(topic, 0): 3}, member_id=member_a, generation=gen_a)
        assert _fetched(bootstrap, group) == {(topic, 0): 3}
        # a rolled-back transaction commits nothing
        with pytest.raises(RuntimeError):
            with conn.transaction():
                db.commit_offsets(conn, group, {(topic, 0): 5, (topic, 1): 5}, member_id=member_a, generation=gen_a)
                raise RuntimeError("the application failed")
        assert _fetched(bootstrap, group) == {(topic, 0): 3}
        # an open transaction: a read_committed (require_stable) OffsetFetch waits for it
        x = _consumer(bootstrap, "gf-x", topic)  # a client of its own, asking about group gf-1
        x.unsubscribe()
        with psycopg.connect(app_dsn) as open_conn:
            db.commit_offsets(open_conn, group, {(topic, 0): 7}, member_id=member_a, generation=gen_a)
            assert _fetched(bootstrap, group) == {(topic, 0): 3}  # not committed yet
            from confluent_kafka import Consumer

            y = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
            try:
                with pytest.raises(KafkaException):
                    y.committed([TopicPartition(topic, 0)], timeout=4)
                open_conn.commit()
                (tp,) = y.committed([TopicPartition(topic, 0)], timeout=30)
                assert tp.offset == 7 and tp.error is None
            finally:
                y.close()
        x.close()
        # a Kafka OffsetCommit after the database's: the newest wins, in either order
        a.commit(offsets=[TopicPartition(topic, 0, 9)], asynchronous=False)
        assert _fetched(bootstrap, group) == {(topic, 0): 9}
        with conn.transaction():
            db.commit_offsets(conn, group, {(topic, 0): 10}, member_id=member_a, generation=gen_a)
        assert _fetched(bootstrap, group) == {(topic, 0): 10}
        # zombies: A leaves, B joins; A's member id and the old generation are refused in the transaction
        a.close()
        a = None
        b = _consumer(bootstrap, group, topic)
        try:
            _assigned(b)
            _g, member_b, gen_b = _wait("B's membership", lambda: (m := db.group_metadata(b))[2] > gen_a and m)
            _refused(conn, "UNKNOWN_MEMBER_ID", group, {(topic, 0): 11}, member_id=member_a, generation=gen_a)
            _refused(conn, "ILLEGAL_GENERATION", group, {(topic, 0): 11}, member_id=member_b, generation=gen_a)
            _refused(conn, "UNKNOWN_MEMBER_ID", group, {(topic, 0): 11})  # standalone: the group has a member
            assert _fetched(bootstrap, group) == {(topic, 0): 10}
            with conn.transaction():
                db.commit_offsets(conn, group, {(topic, 1): 4}, member_id=member_b, generation=gen_b)
        finally:
            b.close()
        assert _fetched(bootstrap, group) == {(topic, 0): 10, (topic, 1): 4}
        # the group is empty now: a standalone commit (generation -1) is accepted, as Kafka
        _wait("the group to be empty", lambda: _try_standalone(conn, group, topic))
        assert _fetched(bootstrap, group) == {(topic, 0): 12, (topic, 1): 4}
        # the commits were drained into __consumer_offsets: they survive the brokers' restart
        owner = psycopg.connect(pg_dsn, autocommit=True)
        _wait("the inbox to drain", lambda: owner.execute("SELECT count(*) FROM oncelog.inbox").fetchone() == (0,))
        for broker in cluster:
            broker.kill()
        # as if a coordinator had died between a generation's append and its mirror write
        owner.execute("UPDATE oncelog.inbox_group SET kind = 'classic', generation = 999, state = 'Stable', "
                      "members = '{\"ghost\": 999}' WHERE group_id = %s", (group,))
        time.sleep(3.5)  # past broker.session.timeout.ms: the nodes' sessions expire
        for broker in cluster:
            broker.start(timeout=60)
        assert _wait("offsets after the restart", lambda: _fetched_quietly(bootstrap, group)) == \
            {(topic, 0): 12, (topic, 1): 4}
        # the loading coordinator rewrote the mirror from the log: the ghost is refused
        _wait("the mirror rewritten", lambda: owner.execute(
            "SELECT members = '{}' AND generation < 999 FROM oncelog.inbox_group WHERE group_id = %s",
            (group,)).fetchone() == (True,))
        _refused(conn, "UNKNOWN_MEMBER_ID", group, {(topic, 0): 13}, member_id="ghost", generation=999)
        owner.close()
        assert conn.execute("SELECT count(*) FROM processed").fetchone() == (15,)
    finally:
        if a is not None:
            a.close()
        conn.close()


def _try_standalone(conn, group: str, topic: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        with conn.transaction():
            db.commit_offsets(conn, group, {(topic, 0): 12})
        return True
    except psycopg.errors.ObjectNotInPrerequisiteState:
        return False


def _fetched_quietly(bootstrap: str, group: str) -> dict[tuple[str, int], int] | None:
    try:
        return _fetched(bootstrap, group)
    except Exception:  # noqa: BLE001 - the coordinator is still loading after the restart
        return None


_APP = """
import sys, time, psycopg
from oncelog import db
client, bootstrap, dsn, topic, group, pause = sys.argv[1:7]
pause = float(pause)
conn = psycopg.connect(dsn)
if client == "confluent":
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    def poll():
        return [(m.topic(), m.partition(), m.offset(), m.value()) for m in c.consume(50, 0.5) if m.error() is None]
else:
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    def poll():
        return [(m.topic, m.partition, m.offset, m.value) for ms in c.poll(500, max_records=50).values() for m in ms]
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    recs = poll()
    if not recs:
        continue
    _g, member, generation = db.group_metadata(c)
    nexts = {}
    with conn.transaction():
        for t, p, o, v in recs:
            conn.execute("INSERT INTO processed VALUES (%s, %s, %s)", (v.decode(), p, o))
            nexts[(t, p)] = max(nexts.get((t, p), 0), o + 1)
        print("inserted", flush=True)
        time.sleep(pause)
        db.commit_offsets(conn, group, nexts, member_id=member, generation=generation)
        time.sleep(pause)
    print("committed", len(recs), flush=True)
"""


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_applications_killed_before_commit_leave_every_row_once(cluster: list[BrokerProcess], pg_dsn: str,
                                                                pg_server, client: str) -> None:
    """Applications SIGKILLed between their rows and COMMIT (before and after commit_offsets),
    then PostgreSQL crashed (immediate restart) under a running application, then one run to
    the end: every record has exactly one row and the group's offsets are the rows'."""
    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic, group, count = f"in-{client}", f"gi-{client}", 400
    _setup_topic(bootstrap, topic, 3, count)
    app_dsn = _app_role(pg_dsn, "gi-", topic)
    def start(pause: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _APP, client, bootstrap, app_dsn, topic, group, str(pause)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def rows() -> int:
        with psycopg.connect(pg_dsn, autocommit=True, connect_timeout=5) as owner:
            return owner.execute("SELECT count(*) FROM processed").fetchone()[0]

    kills = 0
    for round_ in range(3):  # SIGKILLed between its rows and COMMIT (before or after commit_offsets)
        app = start(0.4)
        try:
            assert app.stdout is not None
            seen = 0
            for line in app.stdout:  # bounded: the app gives up after 240 s
                if line.startswith(b"inserted"):
                    seen += 1
                    if seen == 2 + round_:
                        time.sleep(0.1 + 0.4 * round_)  # before, around, after commit_offsets
                        app.kill()
                        kills += 1
                        break
        finally:
            app.kill()
            app.wait(30)
    assert kills == 3
    assert 0 < rows() < count
    app = start(0.2)  # PostgreSQL crashes under it: its transaction in flight is lost
    try:
        assert app.stdout is not None
        for line in app.stdout:
            if line.startswith(b"committed"):
                break
        pg_server.restart("immediate")
    finally:
        app.kill()
        app.wait(30)
    app = start(0.0)
    try:
        _wait("every record processed", lambda: rows() >= count, timeout=120)
        time.sleep(1.0)
    finally:
        app.kill()
        app.wait(30)
    with psycopg.connect(pg_dsn, autocommit=True) as owner:
        values = [r[0] for r in owner.execute("SELECT value FROM processed")]
    dup = [v for v, n in collections.Counter(values).items() if n > 1]
    assert not dup, f"rows written twice: {dup[:10]}"
    assert sorted(values) == sorted(f"v{i}" for i in range(count))
    # the offsets the group holds are those of the rows: every partition read to its end (the
    # coordinator may still be moving after the store's crash: NOT_COORDINATOR is retried)
    expected = {(topic, p): len(range(p, count, 3)) for p in range(3)}
    assert _wait("the group's offsets", lambda: _fetched_quietly(bootstrap, group)) == expected


def test_consumer_group_member_epochs_fence(cluster: list[BrokerProcess], pg_dsn: str) -> None:
    """KIP-848 (group.protocol=consumer): the member epoch fences as the generation does."""
    from confluent_kafka import Consumer

    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic, group = "epochs", "ge-1"
    _setup_topic(bootstrap, topic, 4, 40)
    app_dsn = _app_role(pg_dsn, "ge-", topic)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    a = Consumer(conf)
    a.subscribe([topic])
    b = None
    conn = psycopg.connect(app_dsn, autocommit=True)
    try:
        _assigned(a)
        _g, member_a, epoch_a = _wait("A's epoch", lambda: (m := db.group_metadata(a))[2] > 0 and m)
        with conn.transaction():
            conn.execute("INSERT INTO processed VALUES ('e', 0, 0)")
            db.commit_offsets(conn, group, {(topic, 0): 1}, member_id=member_a, generation=epoch_a)
        assert _fetched(bootstrap, group) == {(topic, 0): 1}
        b = Consumer(conf)
        b.subscribe([topic])
        # A's epoch moves as partitions go to B: the old epoch is refused
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and db.group_metadata(a)[2] == epoch_a:
            a.consume(10, 0.2)
            b.consume(10, 0.2)
        assert db.group_metadata(a)[2] > epoch_a
        _refused(conn, "STALE_MEMBER_EPOCH", group, {(topic, 0): 2}, member_id=member_a, generation=epoch_a)
        _refused(conn, "UNKNOWN_MEMBER_ID", group, {(topic, 0): 2}, member_id="no-such-member", generation=epoch_a)
        assert _fetched(bootstrap, group) == {(topic, 0): 1}
    finally:
        a.close()
        if b is not None:
            b.close()
        conn.close()


def test_a_coordinator_failover_keeps_fencing_and_pending_commits(cluster: list[BrokerProcess], pg_dsn: str) -> None:
    """The group's coordinator is SIGKILLed: a commit made while it is down is served by the
    new coordinator (read through, then drained), whose load rewrote the group mirror, and
    whose next generation fences the old one."""
    from confluent_kafka.admin import AdminClient

    bootstrap = ",".join(b.bootstrap for b in cluster)
    topic, group = "failover", "gfo-1"
    _setup_topic(bootstrap, topic, 2, 20)
    app_dsn = _app_role(pg_dsn, "gfo-", topic)
    a = _consumer(bootstrap, group, topic)
    b = None
    conn = psycopg.connect(app_dsn, autocommit=True)
    try:
        _assigned(a)
        _g, member_a, gen_a = _wait("A's membership", lambda: (m := db.group_metadata(a))[2] >= 0 and m)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        coordinator = next(p for p in cluster if p.node_id == desc.coordinator.id)
        coordinator.kill()
        with conn.transaction():  # against the mirror the dead coordinator wrote
            conn.execute("INSERT INTO processed VALUES ('during', 0, 0)")
            db.commit_offsets(conn, group, {(topic, 0): 4}, member_id=member_a, generation=gen_a)
        survivor = next(p for p in cluster if p is not coordinator).bootstrap
        assert _wait("the new coordinator", lambda: _fetched_quietly(survivor, group)) == {(topic, 0): 4}
        with psycopg.connect(pg_dsn, autocommit=True) as owner:
            _wait("the new coordinator to drain", lambda: owner.execute(
                "SELECT count(*) FROM oncelog.inbox").fetchone() == (0,))
        a.close()  # A leaves; B joins: the new coordinator makes the next generation
        a = None
        b = _consumer(survivor, group, topic)
        _assigned(b)
        _g, member_b, gen_b = _wait("B's membership", lambda: (m := db.group_metadata(b))[2] > gen_a and m)
        _refused(conn, "ILLEGAL_GENERATION", group, {(topic, 0): 5}, member_id=member_b, generation=gen_a)
        with conn.transaction():
            db.commit_offsets(conn, group, {(topic, 1): 6}, member_id=member_b, generation=gen_b)
        assert _fetched(survivor, group) == {(topic, 0): 4, (topic, 1): 6}
    finally:
        if a is not None:
            a.close()
        if b is not None:
            b.close()
        conn.close()

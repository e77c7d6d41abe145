"""The database outbox's SQL (issue 31, cluster/outbox_schema.py) on a real PostgreSQL: what
``oncelog.send`` refuses leaves nothing, what it accepts lands in the pending table in call
order, it is granted to nobody by default, its ACL check is Kafka's, its murmur2 is Kafka's, and
the drain's delete is all-or-nothing with the append (``oncelog_append``)."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from cluster_store import Store
from oncelog import db
from oncelog.cluster import topics
from oncelog.storage.engines.postgres.group_commit import AppendRequest
from oncelog.cluster.errors import StoreUnavailable
from oncelog.protocol import records


def _murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), written from its definition."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = len(data) % 4
    tail = data[4 * n4:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def _allow(conn, principal: str, topic: str, *, op: int = 4, permission: int = 3, pattern: int = 3,
           host: str = "*") -> None:
    conn.execute("INSERT INTO oncelog_acl VALUES (2, %s, %s, %s, %s, %s, %s)", (topic, pattern, principal, host, op,
                                                                               permission))


@pytest.fixture
def app(store: Store):
    """A login role 'app' (User:app) with USAGE on the schema and EXECUTE on send, and its
    connection; topics 'orders' (3 partitions) and 'compacted' (1, cleanup.policy=compact)."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    c = store.conn
    c.execute(f"CREATE ROLE {role} LOGIN")
    c.execute(f"GRANT USAGE ON SCHEMA oncelog TO {role}")
    c.execute(f"GRANT EXECUTE ON FUNCTION oncelog.send(text, bytea, bytea, jsonb, integer) TO {role}")
    topics.create(c, "orders", 3)
    topics.create(c, "compacted", 1, {"cleanup.policy": "compact", "max.message.bytes": "2000"})
    info = psycopg.conninfo.conninfo_to_dict(store.dsn)
    info["user"] = role
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True)
    try:
        yield role, conn
    finally:
        conn.close()
        c.execute(f"DROP OWNED BY {role}")
        c.execute(f"DROP ROLE {role}")


def _pending(store: Store) -> list[tuple]:
    return store.conn.execute("SELECT o.key, o.value, p.partition FROM oncelog.outbox o "
                              "JOIN oncelog_partition p ON p.id = o.partition_id ORDER BY o.id").fetchall()


def test_murmur2_is_kafkas(store: Store) -> None:
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", b"\xff\xfe\xfd\xfc\xfb", bytes(range(256)),
            b"order-42", "ключ".encode()]
    # Kafka's own test vectors (UtilsTest.testMurmur2)
    assert _murmur2(b"21") == -973932308 and _murmur2(b"foobar") == -790332482
    for k in keys + [b"21", b"foobar"]:
        (got,), = store.conn.execute("SELECT oncelog.murmur2(%s)", (k,)).fetchall()
        assert got == _murmur2(k), k


def test_nothing_is_granted_to_public(store: Store) -> None:
    role = f"nobody_{uuid.uuid4().hex[:8]}"
    store.conn.execute(f"CREATE ROLE {role} LOGIN")
    topics.create(store.conn, "t", 1)
    info = psycopg.conninfo.conninfo_to_dict(store.dsn)
    info["user"] = role
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT oncelog.send('t', NULL, 'v'::bytea)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM oncelog.outbox")
    finally:
        store.conn.execute(f"DROP ROLE {role}")
    assert _pending(store) == []


def test_refusals_leave_nothing(store: Store, app) -> None:
    role, conn = app
    _allow(store.conn, f"User:{role}", "orders")
    _allow(store.conn, f"User:{role}", "comp", pattern=4)  # prefixed: 'compacted'
    cases = [
        (("nope", b"k", b"v"), {}, psycopg.errors.UndefinedObject, "UNKNOWN_TOPIC_OR_PARTITION"),
        ((None, b"k", b"v"), {}, psycopg.errors.NullValueNotAllowed, "topic must not be NULL"),
        (("orders", b"k", b"v"), {"partition": 3}, psycopg.errors.NumericValueOutOfRange, "out of range"),
        (("orders", b"k", b"v"), {"partition": -1}, psycopg.errors.NumericValueOutOfRange, "out of range"),
        (("compacted", None, b"v"), {}, psycopg.errors.NullValueNotAllowed, "without key"),
        (("compacted", b"k", b"x" * 2000), {}, psycopg.errors.ProgramLimitExceeded, "MESSAGE_TOO_LARGE"),
        (("orders", b"k", b"v"), {"headers": [1, 2]}, psycopg.errors.InvalidParameterValue, "header"),
        (("orders", b"k", b"v"), {"headers": "x"}, psycopg.errors.InvalidParameterValue, "headers"),
        (("__consumer_offsets", b"k", b"v"), {}, None, None),  # does not exist in this store: unknown
    ]
    for args, kw, err, text in cases:
        with pytest.raises(psycopg.Error) as info:
            with conn.transaction():
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS mine (x int)")
                conn.execute("INSERT INTO mine VALUES (1)")
                conn.execute("SELECT oncelog.send(%s, %s, %s, %s, %s)",
                             (*args, None if "headers" not in kw else json.dumps(kw["headers"]), kw.get("partition")))
        if err is not None:
            assert isinstance(info.value, err), (args, kw, info.value)
            assert text in str(info.value), (args, kw, info.value)
    assert _pending(store) == []
    assert conn.execute("SELECT to_regclass('pg_temp.mine')").fetchone()[0] is None  # rolled back with it


def test_acls_are_the_clusters(store: Store, app) -> None:
    role, conn = app
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="TOPIC_AUTHORIZATION_FAILED"):
        db.send(conn, "orders", b"v", key=b"k")  # no binding at all: refused (no allow-everyone)
    _allow(store.conn, f"User:{role}", "orders", op=3)  # Read does not grant Write
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        db.send(conn, "orders", b"v", key=b"k")
    _allow(store.conn, f"User:{role}", "orders", host="10.9.9.9")  # another host
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        db.send(conn, "orders", b"v", key=b"k")
    _allow(store.conn, "User:*", "*", op=2)  # All on every topic, for everyone
    assert db.send(conn, "orders", b"v1", key=b"k") in (0, 1, 2)
    _allow(store.conn, f"User:{role}", "ord", permission=2, pattern=4)  # a DENY wins
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        db.send(conn, "orders", b"v2", key=b"k")
    # the role's principal is mapped: the DENY is User:<role>'s, not User:svc's
    store.conn.execute("INSERT INTO oncelog.role_principal VALUES (%s, 'User:svc')", (role,))
    assert db.send(conn, "orders", b"v3", key=b"k") in (0, 1, 2)
    assert [r[1] for r in _pending(store)] == [b"v1", b"v3"]


def test_sent_rows_are_pending_in_order_and_partitioned_as_kafka(store: Store, app) -> None:
    role, conn = app
    _allow(store.conn, f"User:{role}", "orders")
    with conn.transaction():
        got = [db.send(conn, "orders", f"v{i}", key=f"key-{i}", headers={"h": "x", "n": None}) for i in range(20)]
        keyless = {db.send(conn, "orders", f"n{i}") for i in range(10)}
        assert db.send(conn, "orders", "p2", partition=2) == 2
    assert got == [(_murmur2(f"key-{i}".encode()) & 0x7FFFFFFF) % 3 for i in range(20)]
    assert len(keyless) == 1  # one partition per transaction for keyless records
    rows = _pending(store)
    assert [r[1] for r in rows] == [f"v{i}".encode() for i in range(20)] + [f"n{i}".encode() for i in range(10)] + [b"p2"]
    with conn.transaction():
        db.send(conn, "orders", "gone")
        conn.execute("SELECT 1")
        raise_rollback = psycopg.Rollback()
        raise raise_rollback
    assert len(_pending(store)) == len(rows)


def test_drain_deletes_its_rows_with_the_append_all_or_nothing(store: Store, app) -> None:
    role, conn = app
    _allow(store.conn, f"User:{role}", "orders")
    db.send(conn, "orders", b"a", partition=0)
    db.send(conn, "orders", b"b", partition=0)
    log = store.lead("orders", 0)
    ids = tuple(r[0] for r in store.conn.execute("SELECT id FROM oncelog.outbox ORDER BY id"))
    batch = records.build_batch([(None, b"a", ()), (None, b"b", ())], timestamp_ms=1)
    # one id that is not there: nothing is written, no row deleted
    bad = log.submit(batch, records.parse_header(batch), drained=ids + (ids[-1] + 1000,))
    with pytest.raises(StoreUnavailable, match="outbox rows"):
        bad.future.result(30)
    assert len(_pending(store)) == 2
    assert store.conn.execute("SELECT count(*) FROM oncelog_batch").fetchone()[0] == 0
    log.resync()
    ok = log.submit(batch, records.parse_header(batch), drained=ids)
    ok.future.result(30)
    assert _pending(store) == []
    assert store.conn.execute("SELECT count(*) FROM oncelog_batch").fetchone()[0] == 1
    assert isinstance(AppendRequest.__dataclass_fields__["drained"].default, tuple)


def test_send_many_is_send_in_one_pipeline(store: Store, app) -> None:
    role, conn = app
    _allow(store.conn, f"User:{role}", "orders")
    with conn.transaction():
        got = db.send_many(conn, "orders", [(f"v{i}", f"key-{i}", [("h", str(i))]) for i in range(50)])
    assert got == [(_murmur2(f"key-{i}".encode()) & 0x7FFFFFFF) % 3 for i in range(50)]
    assert [r[1] for r in _pending(store)] == [f"v{i}".encode() for i in range(50)]
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        with conn.transaction():
            db.send_many(conn, "orders", [("ok",), ("bad", None, None, 7)])
    assert len(_pending(store)) == 50  # the refusal took the whole transaction with it
    assert db.send_many(conn, "orders", []) == []


def test_a_store_role_that_may_not_create_the_schema_still_gets_the_cluster(pg_dsn: str, caplog) -> None:
    """ensure_schema installs the outbox in a savepoint: a role with CREATE on schema public but
    not on the database gets every cluster table, no outbox, and one warning."""
    from oncelog.cluster import schema

    role = f"limited_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {role}")
    info = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    info["user"] = role
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as conn:
            schema.ensure_schema(conn)
            assert conn.execute("SELECT to_regclass('oncelog_batch') IS NOT NULL, "
                                "to_regclass('oncelog.outbox') IS NULL").fetchone() == (True, True)
        assert "database outbox" in caplog.text
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute(f"DROP OWNED BY {role}")
            c.execute(f"DROP ROLE {role}")

"""The database inbox's SQL (issue 31, cluster/inbox_schema.py) on a real PostgreSQL:
``oncelog.commit_offsets`` is granted to nobody by default, authorizes with the cluster's ACLs
(Read on the group and on the topic), refuses bad input and fenced members (against the group
coordinator's mirror ``oncelog.inbox_group``) before writing anything, and a rolled-back
transaction leaves no pending commit; ``oncelog.inbox_fetch`` sees a partition an open
transaction is committing without waiting for it."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from cluster_store import Store
from oncelog import db
from oncelog.cluster import topics
from oncelog.cluster.inbox_schema import COMMIT_SIGNATURE


def _allow(conn, principal: str, rtype: int, name: str, *, op: int = 3, permission: int = 3) -> None:
    conn.execute("INSERT INTO oncelog_acl VALUES (%s, %s, 3, %s, '*', %s, %s)", (rtype, name, principal, op, permission))


def _mirror(conn, group: str, kind: str, generation: int, state: str, members: dict[str, int]) -> None:
    conn.execute("INSERT INTO oncelog.inbox_group (group_id, offsets_partition, kind, generation, state, members) "
                 "VALUES (%s, 0, %s, %s, %s, %s) ON CONFLICT (group_id) DO UPDATE "
                 "SET kind = EXCLUDED.kind, generation = EXCLUDED.generation, state = EXCLUDED.state, "
                 "members = EXCLUDED.members", (group, kind, generation, state, json.dumps(members)))


def _pending(store: Store) -> list[tuple]:
    return store.conn.execute("SELECT group_id, topic, partition, next_offset, metadata FROM oncelog.inbox "
                              "ORDER BY id").fetchall()


@pytest.fixture
def app(store: Store):
    """A login role (User:<role>) granted the inbox, allowed to Read group 'g*'... literal 'g'
    and topic 'in' (3 partitions); its connection."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    c = store.conn
    c.execute(f"CREATE ROLE {role} LOGIN")
    c.execute(f"GRANT USAGE ON SCHEMA oncelog TO {role}")
    c.execute(f"GRANT EXECUTE ON FUNCTION {COMMIT_SIGNATURE} TO {role}")
    topics.create(c, "in", 3)
    topics.create(c, "secret", 1)
    _allow(c, f"User:{role}", 3, "g")
    _allow(c, f"User:{role}", 2, "in")
    _allow(c, f"User:{role}", 3, "other")
    info = psycopg.conninfo.conninfo_to_dict(store.dsn)
    info["user"] = role
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True)
    try:
        yield role, conn
    finally:
        conn.close()
        c.execute(f"DROP OWNED BY {role}")
        c.execute(f"DROP ROLE {role}")


def test_nothing_is_granted_to_public(store: Store) -> None:
    role = f"nobody_{uuid.uuid4().hex[:8]}"
    store.conn.execute(f"CREATE ROLE {role} LOGIN")
    topics.create(store.conn, "t", 1)
    info = psycopg.conninfo.conninfo_to_dict(store.dsn)
    info["user"] = role
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT oncelog.commit_offsets('g', '', -1, 't', 0, 1)")
            for table in ("oncelog.inbox", "oncelog.inbox_group"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(f"SELECT count(*) FROM {table}")
    finally:
        store.conn.execute(f"DROP ROLE {role}")
    assert _pending(store) == []


def _refused(conn, args: tuple, kafka_error: str, sqlstate: str) -> None:
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS mine (x int)")
    with pytest.raises(psycopg.Error) as info:
        with conn.transaction():
            conn.execute("INSERT INTO mine VALUES (1)")
            conn.execute("SELECT oncelog.commit_offsets(%s, %s, %s, %s, %s, %s, %s)", args)
    assert info.value.sqlstate == sqlstate, (args, info.value)
    assert info.value.diag.message_detail == kafka_error, (args, info.value)
    assert f"oncelog.commit_offsets: {kafka_error}" in str(info.value)
    assert conn.execute("SELECT count(*) FROM mine").fetchone() == (0,)  # the whole transaction rolled back


def test_refusals_leave_nothing(store: Store, app) -> None:
    role, conn = app
    store.conn.execute("INSERT INTO oncelog_broker_config (resource, configs) VALUES ('', %s) "
                       "ON CONFLICT (resource) DO UPDATE SET configs = EXCLUDED.configs",
                       (json.dumps({"offset.metadata.max.bytes": "10"}),))
    cases = [
        ((None, "", -1, "in", 0, 5, None), "INVALID_GROUP_ID", "22004"),
        (("", "", -1, "in", 0, 5, None), "INVALID_GROUP_ID", "22004"),
        (("g", "", -1, None, 0, 5, None), "INVALID_REQUEST", "22004"),
        (("g", "", -1, "in", 0, None, None), "INVALID_REQUEST", "22004"),
        (("g", "", None, "in", 0, 5, None), "INVALID_REQUEST", "22004"),
        (("g", "", -1, "nope", 0, 5, None), "UNKNOWN_TOPIC_OR_PARTITION", "42704"),
        (("g", "", -1, "in", 3, 5, None), "UNKNOWN_TOPIC_OR_PARTITION", "22003"),
        (("g", "", -1, "in", -1, 5, None), "UNKNOWN_TOPIC_OR_PARTITION", "22003"),
        (("g", "", -1, "in", 0, -2, None), "INVALID_REQUEST", "22003"),
        (("g", "", -1, "in", 0, 5, "x" * 11), "OFFSET_METADATA_TOO_LARGE", "54000"),
        (("nogrant", "", -1, "in", 0, 5, None), "GROUP_AUTHORIZATION_FAILED", "42501"),
        (("g", "", -1, "secret", 0, 5, None), "TOPIC_AUTHORIZATION_FAILED", "42501"),
        (("g", "", 3, "in", 0, 5, None), "GROUP_ID_NOT_FOUND", "55000"),  # a generation, no such group
    ]
    for args, kafka_error, sqlstate in cases:
        _refused(conn, args, kafka_error, sqlstate)
    assert _pending(store) == []
    # a DENY wins over the ALLOW
    _allow(store.conn, f"User:{role}", 3, "g", permission=2)
    _refused(conn, ("g", "", -1, "in", 0, 5, None), "GROUP_AUTHORIZATION_FAILED", "42501")
    assert _pending(store) == []


def test_the_role_principal_map_is_used(store: Store, app) -> None:
    role, conn = app
    store.conn.execute("INSERT INTO oncelog.role_principal VALUES (%s, 'User:svc')", (role,))
    _refused(conn, ("g", "", -1, "in", 0, 5, None), "GROUP_AUTHORIZATION_FAILED", "42501")
    _allow(store.conn, "User:svc", 3, "g")
    _allow(store.conn, "User:svc", 2, "*")
    with conn.transaction():
        db.commit_offsets(conn, "g", {("in", 0): 5})
    assert _pending(store) == [("g", "in", 0, 5, "")]


def test_classic_fencing(store: Store, app) -> None:
    _role, conn = app
    _mirror(store.conn, "g", "classic", 7, "Stable", {"m1": 7, "m2": 7})
    _refused(conn, ("g", "m1", 6, "in", 0, 5, None), "ILLEGAL_GENERATION", "55000")
    _refused(conn, ("g", "zombie", 7, "in", 0, 5, None), "UNKNOWN_MEMBER_ID", "55000")
    _refused(conn, ("g", "", -1, "in", 0, 5, None), "UNKNOWN_MEMBER_ID", "55000")  # standalone, group has members
    assert _pending(store) == []
    with conn.transaction():
        db.commit_offsets(conn, "g", [("in", 1, 9), ("in", 0, 5)], member_id="m1", generation=7, metadata="md")
    assert _pending(store) == [("g", "in", 0, 5, "md"), ("g", "in", 1, 9, "md")]  # in (topic, partition) order
    _mirror(store.conn, "g", "classic", 8, "CompletingRebalance", {"m1": 8})
    _refused(conn, ("g", "m1", 8, "in", 0, 6, None), "REBALANCE_IN_PROGRESS", "55000")
    _refused(conn, ("g", "m1", 7, "in", 0, 6, None), "ILLEGAL_GENERATION", "55000")
    _mirror(store.conn, "g", "classic", 8, "Dead", {})
    _refused(conn, ("g", "m1", 8, "in", 0, 6, None), "COORDINATOR_NOT_AVAILABLE", "55000")
    _mirror(store.conn, "g", "classic", 8, "Empty", {})  # no members: standalone commits, like Kafka
    _refused(conn, ("g", "m1", 8, "in", 0, 6, None), "UNKNOWN_MEMBER_ID", "55000")
    with conn.transaction():
        db.commit_offsets(conn, "g", {("in", 0): 6})
    assert len(_pending(store)) == 3


def test_consumer_group_fencing(store: Store, app) -> None:
    _role, conn = app
    _mirror(store.conn, "g", "consumer", 4, "consumer", {"a": 3, "b": 4})
    _refused(conn, ("g", "a", 2, "in", 0, 5, None), "STALE_MEMBER_EPOCH", "55000")
    _refused(conn, ("g", "a", 4, "in", 0, 5, None), "STALE_MEMBER_EPOCH", "55000")
    _refused(conn, ("g", "c", 3, "in", 0, 5, None), "UNKNOWN_MEMBER_ID", "55000")
    _refused(conn, ("g", "", -1, "in", 0, 5, None), "UNKNOWN_MEMBER_ID", "55000")
    with conn.transaction():
        db.commit_offsets(conn, "g", {("in", 0): 5}, member_id="a", generation=3)
    _mirror(store.conn, "g", "consumer", 5, "consumer", {})
    with conn.transaction():
        db.commit_offsets(conn, "g", {("in", 0): 6})
    assert [r[3] for r in _pending(store)] == [5, 6]


def test_a_rolled_back_transaction_commits_nothing(store: Store, app) -> None:
    _role, conn = app
    with pytest.raises(RuntimeError):
        with conn.transaction():
            db.commit_offsets(conn, "g", {("in", 0): 5, ("in", 2): 7})
            raise RuntimeError("the application failed")
    assert _pending(store) == []


def test_an_open_transaction_is_seen_without_waiting(store: Store, app) -> None:
    """inbox_fetch (the coordinator's OffsetFetch read-through) names the partitions an open
    transaction is committing (require_stable: UNSTABLE_OFFSET_COMMIT) without waiting for it,
    and returns the newest committed pending row per partition."""
    _role, conn = app
    with conn.transaction():
        db.commit_offsets(conn, "g", {("in", 0): 5, ("in", 1): 3})
    with conn.transaction():
        db.commit_offsets(conn, "g", {("in", 0): 8})
    conn.execute("BEGIN")
    db.commit_offsets(conn, "g", {("in", 1): 4, ("in", 2): 9})
    try:
        q = "SELECT topic, partition, next_offset, unstable FROM oncelog.inbox_fetch('g', %s, %s, %s) ORDER BY 1, 2"
        store.conn.execute("SET statement_timeout = '5s'")
        got = store.conn.execute(q, (["in"] * 3, [0, 1, 2], True)).fetchall()
        assert got == [("in", 0, 8, False), ("in", 1, 3, True), ("in", 2, None, True)]
        got = store.conn.execute(q, ([], [], False)).fetchall()
        assert got == [("in", 0, 8, False), ("in", 1, 3, False)]
    finally:
        conn.execute("ROLLBACK")
        store.conn.execute("RESET statement_timeout")
    got = store.conn.execute(q, (["in"] * 3, [0, 1, 2], True)).fetchall()
    assert got == [("in", 0, 8, False), ("in", 1, 3, False)]


def test_only_read_committed_transactions_may_commit_offsets(store: Store, app) -> None:
    """Under REPEATABLE READ / SERIALIZABLE the transaction's snapshot may predate a rebalance
    (the fencing check would read an old generation): refused, nothing written."""
    _role, conn = app
    _mirror(store.conn, "g", "classic", 7, "Stable", {"m1": 7})
    for level in ("REPEATABLE READ", "SERIALIZABLE"):
        conn.execute(f"BEGIN ISOLATION LEVEL {level}")
        try:
            conn.execute("SELECT 1")  # the snapshot is taken here
            _mirror(store.conn, "g", "classic", 8, "Stable", {"m1": 8})  # the group moves on meanwhile
            with pytest.raises(psycopg.errors.FeatureNotSupported) as info:
                db.commit_offsets(conn, "g", {("in", 0): 5}, member_id="m1", generation=7)
            assert info.value.diag.message_detail == "INVALID_TXN_STATE"
        finally:
            conn.execute("ROLLBACK")
        _mirror(store.conn, "g", "classic", 7, "Stable", {"m1": 7})
    assert _pending(store) == []

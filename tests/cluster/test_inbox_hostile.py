"""The database inbox under hostile group ids (R22; docs/DATABASE.md): a client that commits for
a group id PostgreSQL cannot keep — a NUL character, or ~2.7 KB of random characters (past the
btree entry limit) — or a group whose mirror row the store refuses for any other reason, never
keeps another group's fencing from reaching ``oncelog.inbox_group``.

Before: the coordinator mirrored every changed group of a ``__consumer_offsets`` partition in one
transaction, so one such group failed every mirror write of its partition for ever: a classic
member whose session expired stayed in the store's copy and its zombie's
``oncelog.commit_offsets`` was accepted (and OffsetFetch answered it); OffsetFetch of the NUL
group answered NOT_COORDINATOR for ever. Real PostgreSQL, a real cluster-mode broker, raw
frames for the hostile client, the application's own transaction for the zombie."""

from __future__ import annotations

import datetime
import random
import string
import uuid
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

import kafka_clients as kc
from cluster_procs import brokers
from cluster_store import wait_until
from oncelog import db
from oncelog.client import ProtocolClient
from oncelog.cluster.inbox_schema import COMMIT_SIGNATURE
from oncelog.coordinator.group.consumer_protocol import encode_subscription
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make

MS = datetime.timedelta(milliseconds=1)
#: one __consumer_offsets partition: every group of the test shares its shard and mirror writes
SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
         "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500"}
NUL_GROUP = "bad\x00group"
TOPIC = "inbox-hostile"


@pytest.fixture
def broker(pg_dsn: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    with brokers(pg_dsn, tmp_path, SMALL, (1,)) as procs:
        yield procs[0]


def _app(dsn: str) -> psycopg.Connection:
    """A login role granted the inbox, allowed to Read every group and the test's topic."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute(f"GRANT USAGE ON SCHEMA oncelog TO {role}")
        c.execute(f"GRANT EXECUTE ON FUNCTION {COMMIT_SIGNATURE} TO {role}")
        c.execute("INSERT INTO oncelog_acl VALUES (3, '*', 3, %s, '*', 3, 3)", (f"User:{role}",))
        c.execute("INSERT INTO oncelog_acl VALUES (2, %s, 3, %s, '*', 3, 3)", (TOPIC, f"User:{role}"))
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["user"] = role
    return psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True)


def _call(c: ProtocolClient, api: int, version: int, cls: str, **fields: Any) -> Any:
    return c.request(api, make(c.classes(api, version)[cls], **fields), version=version)


def _commit(c: ProtocolClient, group: str, offset: int) -> ErrorCode:
    m = c.classes(apis.OFFSET_COMMIT, 2)
    r = c.request(apis.OFFSET_COMMIT, m["OffsetCommitRequest"](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time=-1 * MS,
        topics=(m["OffsetCommitRequestTopic"](name=TOPIC, partitions=(m["OffsetCommitRequestPartition"](
            partition_index=0, committed_offset=offset, committed_metadata=""),)),)), version=2)
    return r.topics[0].partitions[0].error_code


def _fetch(c: ProtocolClient, group: str) -> tuple[ErrorCode, dict[int, int]]:
    m = c.classes(apis.OFFSET_FETCH, 8)
    r = c.request(apis.OFFSET_FETCH, m["OffsetFetchRequest"](groups=(m["OffsetFetchRequestGroup"](
        group_id=group, topics=None),), require_stable=False), version=8)
    (g,) = r.groups
    return g.error_code, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def _join_classic(c: ProtocolClient, group: str, session_ms: int) -> tuple[str, int]:
    """A classic consumer that joins, syncs as leader and then never heartbeats: (member id, generation)."""
    sub = encode_subscription([TOPIC])
    j = _call(c, apis.JOIN_GROUP, 3, "JoinGroupRequest", group_id=group, session_timeout=session_ms * MS,
              rebalance_timeout=session_ms * MS, member_id="", protocol_type="consumer",
              protocols=(make(c.classes(apis.JOIN_GROUP, 3)["JoinGroupRequestProtocol"], name="range", metadata=sub),))
    assert j.error_code == ErrorCode.none, j
    s = _call(c, apis.SYNC_GROUP, 3, "SyncGroupRequest", group_id=group, generation_id=j.generation_id,
              member_id=j.member_id, group_instance_id=None,
              assignments=(make(c.classes(apis.SYNC_GROUP, 3)["SyncGroupRequestAssignment"],
                                member_id=j.member_id, assignment=b""),))
    assert s.error_code == ErrorCode.none, s
    return j.member_id, j.generation_id


def _mirrored(owner: psycopg.Connection, group: str) -> tuple | None:
    return owner.execute("SELECT kind, state, members FROM oncelog.inbox_group WHERE group_id = %s",
                         (group,)).fetchone()


def test_a_group_id_the_store_cannot_keep_never_blocks_another_groups_fencing(broker: BrokerProcess,
                                                                              pg_dsn: str) -> None:
    kc.create_topic("confluent", broker.bootstrap, TOPIC, 1)
    owner = psycopg.connect(pg_dsn, autocommit=True)
    app = _app(pg_dsn)
    # a group whose mirror row the store refuses whatever its id (stands for any failure of one row)
    owner.execute("CREATE FUNCTION public.poison() RETURNS trigger LANGUAGE plpgsql AS $$ "
                  "BEGIN RAISE EXCEPTION 'this row is poisoned'; END $$")
    owner.execute("CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON oncelog.inbox_group FOR EACH ROW "
                  "WHEN (NEW.group_id = 'poisoned') EXECUTE FUNCTION public.poison()")
    random_id = "".join(random.Random(7).choice(string.ascii_letters + string.digits) for _ in range(2_700))
    try:
        with ProtocolClient(broker.bootstrap) as c:
            member, generation = _join_classic(c, "victim", session_ms=1_000)
            wait_until(lambda: (_mirrored(owner, "victim") or (None,) * 3)[2] == {member: generation},
                       30, what="the victim's membership in the store")
            # the hostile commits: refused before anything changes; the poisoned group is served
            assert _commit(c, NUL_GROUP, 5) == ErrorCode.invalid_group_id
            assert _commit(c, random_id, 5) == ErrorCode.invalid_group_id
            assert _commit(c, "poisoned", 5) == ErrorCode.none
            assert _fetch(c, NUL_GROUP) == (ErrorCode.none, {})  # answered, not NOT_COORDINATOR
            assert _fetch(c, "poisoned") == (ErrorCode.none, {0: 5})
            # the victim stops heartbeating: its session expires and the store forgets its member
            # in the same mirror write as the poisoned group's (refused) row
            wait_until(lambda: (_mirrored(owner, "victim") or (None,) * 3)[2] == {}, 30,
                       what="the expired member to leave the store's copy")
            # its zombie's database commit is refused inside the application's transaction
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
                with app.transaction():
                    db.commit_offsets(app, "victim", {(TOPIC, 0): 42}, member_id=member, generation=generation)
            assert info.value.diag.message_detail == "UNKNOWN_MEMBER_ID"
            assert _fetch(c, "victim") == (ErrorCode.none, {})
            # a KIP-848 member id with a NUL is mirrored too (U+FFFD in its place)
            m = c.classes(apis.CONSUMER_GROUP_HEARTBEAT, 1)
            hb = c.request(apis.CONSUMER_GROUP_HEARTBEAT, m["ConsumerGroupHeartbeatRequest"](
                group_id="kip848", member_id="m\x00x", member_epoch=0, rebalance_timeout=30_000 * MS,
                subscribed_topic_names=(TOPIC,), subscribed_topic_regex=None, topic_partitions=()), version=1)
            assert hb.error_code == ErrorCode.none, hb
            wait_until(lambda: _mirrored(owner, "kip848") is not None, 30, what="the KIP-848 member in the store")
            assert _mirrored(owner, "kip848") == ("consumer", "consumer", {"m\ufffdx": hb.member_epoch})
        assert _mirrored(owner, "poisoned") is None
        log = broker.log_tail(2_000_000)
        assert "bug:" not in log and "Traceback" not in log, log[-4000:]
        assert "refused the mirror row of group 'poisoned'" in log and "this row is poisoned" in log, log[-4000:]
    finally:
        app.close()
        owner.close()

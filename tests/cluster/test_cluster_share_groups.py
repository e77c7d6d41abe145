"""Share groups (KIP-932, issue 30) in cluster mode, on a real PostgreSQL: the share-partition
state lives in the store (cluster/share_state.py), written by the topic partition's leader fenced
by its leader epoch.

* the store layer: a write at the leader's epoch lands; one at an older epoch, or by a broker
  that is not the leader, is refused (NOT_LEADER_OR_FOLLOWER) and changes nothing;
* two brokers, three confluent-kafka ShareConsumers in explicit mode accepting every record and
  committing; the broker leading the partition (where ShareFetch and ShareAcknowledge go, and
  whose share state is in the store), which also coordinates the group (where the members
  heartbeat), is SIGKILLed mid-stream: the survivor takes the partition
  over and loads the state from the store. Nothing is lost (every record ends accepted) and no
  record whose acceptance was confirmed before the kill is delivered again after it.

Before: cluster mode neither advertised nor routed the share APIs (``routes.EMBEDDED_ONLY``): a
ShareConsumer got nothing.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

import kafka_clients as kc
from cluster_procs import brokers
from oncelog.cluster.connection import StoreConnection
from oncelog.cluster.schema import ensure_schema
from oncelog.cluster.share_state import ConfigRow, SnapshotRow, StoreShareState
from oncelog.protocol.errors import NotLeaderOrFollower

SESSION = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
           "group.share.heartbeat.interval.ms": "500", "group.share.session.timeout.ms": "6000"}
TOPIC = "share-c"
GROUP = "sg-cluster"  # replaced by the test with one its partition's leader also coordinates


def _coordinator(bootstrap: str, group: str) -> int:
    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis

    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.FIND_COORDINATOR, 4)
        r = c.request(apis.FIND_COORDINATOR, m["FindCoordinatorRequest"](key_type=0, coordinator_keys=(group,)), version=4)
        return int(r.coordinators[0].node_id)


def share_consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([TOPIC])
    return c


def poll_records(c: Any, timeout: float) -> list[Any]:
    return [m for m in (c.poll(timeout) or []) if m.error() is None]


def _round(consumers: list[Any], delivered: list[tuple[int, float]], confirmed: dict[int, float]) -> None:
    """One poll of each consumer: accept what it got and commit; note what the broker confirmed."""
    from confluent_kafka import AcknowledgeType

    for c in consumers:
        got = poll_records(c, 0.2)
        for m in got:
            delivered.append((m.offset(), time.monotonic()))
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if not got:
            continue
        try:
            results = c.commit_sync(10)
        except Exception:  # noqa: BLE001 - the leader is down: nothing confirmed
            continue
        if all(err is None for err in results.values()):
            now = time.monotonic()
            for m in got:
                confirmed.setdefault(m.offset(), now)


def test_share_state_writes_are_fenced_by_the_leader_epoch(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ensure_schema(conn)
        conn.execute("INSERT INTO oncelog_partition (topic, partition, leader_broker, leader_epoch) "
                     "VALUES ('t', 0, 1, 3)")
    tid = uuid.uuid4()
    leader = StoreShareState(StoreConnection(lambda: psycopg.connect(pg_dsn, autocommit=True)), node_id=1)
    other = StoreShareState(StoreConnection(lambda: psycopg.connect(pg_dsn, autocommit=True)), node_id=2)
    try:
        leader.write([SnapshotRow("g", tid, "t", 0, 3, b"state-1"), ConfigRow("g", {"share.auto.offset.reset": "earliest"})])
        assert leader.load("g", tid, 0) == b"state-1"
        assert leader.load_configs("g") == {"share.auto.offset.reset": "earliest"}
        for store, epoch in ((leader, 2), (other, 3)):  # a deposed leader's epoch; not the leader at all
            with pytest.raises(NotLeaderOrFollower):
                store.write([ConfigRow("g", None), SnapshotRow("g", tid, "t", 0, epoch, b"stale")])
            assert leader.load("g", tid, 0) == b"state-1"  # nothing written, the config row neither
            assert leader.load_configs("g") == {"share.auto.offset.reset": "earliest"}
        leader.write([SnapshotRow("g", tid, "t", 0, 3, None)])
        assert leader.load("g", tid, 0) is None
    finally:
        leader.conn.drop()
        other.conn.drop()


def _leader(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=30)
    return md.topics[TOPIC].partitions[0].leader


def test_share_group_survives_a_sigkill_of_the_partition_leader(pg_dsn: str, tmp_path: Path) -> None:
    n = 1500
    with brokers(pg_dsn, tmp_path, SESSION, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, TOPIC, 1)
        leader = _leader(bootstrap)
        # a group its partition's leader also coordinates: the SIGKILL takes both the share state's
        # writer and the members' coordinator
        group = next(g for g in (f"{GROUP}-{i}" for i in range(64)) if _coordinator(bootstrap, g) == leader)
        first = n // 3
        kc.produce("confluent", bootstrap, TOPIC, [(0, None, b"v%d" % i) for i in range(first)],
                   extra={"batch.num.messages": 10})
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

        admin = AdminClient({"bootstrap.servers": bootstrap})  # the group's config, in the store
        res = ConfigResource("GROUP", group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(30)
        consumers = [share_consumer(bootstrap, group) for _ in range(3)]
        delivered: list[tuple[int, float]] = []
        confirmed: dict[int, float] = {}
        holder: Any = None
        try:
            deadline = time.monotonic() + 90
            while len(confirmed) < first and time.monotonic() < deadline:
                _round(consumers, delivered, confirmed)
            assert len(confirmed) == first, f"only {len(confirmed)} confirmed before the kill"
            holder = share_consumer(bootstrap, group)  # acquires, never acknowledges
            for _ in range(6):  # it joins (nothing to fetch yet)
                assert not poll_records(holder, 0.5)
            kc.produce("confluent", bootstrap, TOPIC, [(0, None, b"v%d" % i) for i in range(first, n)],
                       extra={"batch.num.messages": 10})
            held: set[int] = set()
            deadline = time.monotonic() + 30
            while not held and time.monotonic() < deadline:
                held = {m.offset() for m in poll_records(holder, 0.5)}  # the others wait: records are left
            assert held, f"the holder got nothing ({len(confirmed)} confirmed, {len(delivered)} delivered)"
            assert _leader(bootstrap) == leader
            victim = next(b for b in procs if b.node_id == leader)
            killed_at = time.monotonic()
            confirmed_before = {o for o, t in confirmed.items() if t < killed_at}
            os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
            holder.close()  # its records were acquired when their leader died: they come back
            holder = None
            deadline = time.monotonic() + 150
            while len(confirmed) < n and time.monotonic() < deadline:
                _round(consumers, delivered, confirmed)
        finally:
            for c in consumers:
                c.close()
            if holder is not None:
                holder.close()
    assert sorted(confirmed) == list(range(n)), f"{n - len(confirmed)} record(s) never accepted"
    again = sorted({o for o, t in delivered if t > killed_at and o in confirmed_before})
    assert not again, f"records confirmed before the kill delivered again: {again[:20]}"
    assert held <= {o for o, t in delivered if t > killed_at}, "the held records were not delivered again"


def _share_fetch(c: Any, group: str, member: str, epoch: int, tid: uuid.UUID | None, *, max_records: int = 10) -> Any:
    import datetime

    from oncelog.protocol import apis
    from oncelog.protocol.messages import make

    m = c.classes(apis.SHARE_FETCH, 1)
    topics = () if tid is None else (make(m["FetchTopic"], topic_id=tid, partitions=(
        make(m["FetchPartition"], partition_index=0, acknowledgement_batches=()),)),)
    return c.request(apis.SHARE_FETCH, make(m["ShareFetchRequest"], group_id=group, member_id=member,
                                            share_session_epoch=epoch, max_wait=datetime.timedelta(0), min_bytes=1,
                                            max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                                            topics=topics, forgotten_topics_data=()), version=1)


def _share_heartbeat(c: Any, group: str, member: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
    from oncelog.protocol import apis
    from oncelog.protocol.messages import make

    m = c.classes(apis.SHARE_GROUP_HEARTBEAT, 1)
    return c.request(apis.SHARE_GROUP_HEARTBEAT, make(m["ShareGroupHeartbeatRequest"], group_id=group, member_id=member,
                                                      member_epoch=epoch, rack_id=None, subscribed_topic_names=topics),
                     version=1)


def test_only_members_open_share_sessions_and_sessions_of_members_gone_close(pg_dsn: str, tmp_path: Path) -> None:
    """Issue 35 row 10. Two brokers; the group's coordinator is not its partition's leader, so the
    leader asks the coordinator (ShareGroupDescribe) who the members are. 51 ShareFetch requests
    with made-up member ids are UNKNOWN_MEMBER_ID (``group.share.max.share.sessions`` is 50 here),
    and a real member then opens its session and gets records; when it leaves (at the
    coordinator), its session at the leader closes within a third of a session timeout and its
    records go back. Before: any member id opened a session, the made-up ones filled the cache
    and the real member got SHARE_SESSION_LIMIT_REACHED, still after a minute."""
    from oncelog.client import ProtocolClient
    from oncelog.protocol.errors import ErrorCode

    with brokers(pg_dsn, tmp_path, {**SESSION, "group.share.max.share.sessions": "50"}, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, TOPIC, 1)
        kc.produce("confluent", bootstrap, TOPIC, [(0, None, b"v%d" % i) for i in range(20)])
        leader = _leader(bootstrap)
        group = next(g for g in (f"{GROUP}-{i}" for i in range(64)) if _coordinator(bootstrap, g) != leader)
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

        admin = AdminClient({"bootstrap.servers": bootstrap})
        res = ConfigResource("GROUP", group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(30)
        lead = next(b for b in procs if b.node_id == leader)
        coord = next(b for b in procs if b.node_id != leader)
        with ProtocolClient(lead.bootstrap) as at_leader, ProtocolClient(coord.bootstrap) as at_coord:
            md = at_leader.request(3, at_leader.classes(3, 12)["MetadataRequest"](
                topics=(at_leader.classes(3, 12)["MetadataRequestTopic"](name=TOPIC, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False), version=12)
            tid = md.topics[0].topic_id
            codes = [_share_fetch(at_leader, group, f"made-up-{i}", 0, tid).error_code for i in range(51)]
            assert set(codes) == {ErrorCode.unknown_member_id}, codes
            hb = _share_heartbeat(at_coord, group, "real", 0, (TOPIC,))
            assert hb.error_code == ErrorCode.none, hb
            res = _share_fetch(at_leader, group, "real", 0, tid)
            assert res.error_code == ErrorCode.none, res
            held = [(r.first_offset, r.last_offset) for t in res.responses for p in t.partitions
                    for r in p.acquired_records]
            assert held, res
            assert _share_heartbeat(at_coord, group, "real", -1, None).error_code == ErrorCode.none
            assert _share_heartbeat(at_coord, group, "other", 0, (TOPIC,)).error_code == ErrorCode.none
            deadline = time.monotonic() + 15
            code, epoch = ErrorCode.none, 1
            while code == ErrorCode.none and time.monotonic() < deadline:
                time.sleep(0.5)
                code = _share_fetch(at_leader, group, "real", epoch, None, max_records=0).error_code
                epoch += 1
            assert code == ErrorCode.share_session_not_found, code
            res = _share_fetch(at_leader, group, "other", 0, tid, max_records=100)
            again = [(r.first_offset, r.delivery_count) for t in res.responses for p in t.partitions
                     for r in p.acquired_records]
            assert (held[0][0], 2) in again, again  # the records the member held went back

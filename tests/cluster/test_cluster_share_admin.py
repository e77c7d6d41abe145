"""Share-group administration (KIP-932, issue 30) in cluster mode, on a real PostgreSQL with two
brokers: AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups are served by the
group's coordinator (broker A), which writes the store's rows although the partition is led by
the other broker (B), where the share state was cached; B reads the changed rows again when the
next share session opens, so the next consumer starts where the administrator said.

* while a ShareConsumer is a member: NON_EMPTY_GROUP (Kafka's answer); sent to B (not the
  coordinator): NOT_COORDINATOR;
* once empty, alter to 40 on A: DescribeShareGroupOffsets on either broker says 40 (the store's),
  and a new consumer through B gets exactly 40..49 (B had cached the start at 50);
* DeleteShareGroupOffsets on A: the next consumer starts over (``earliest``, the group's config);
* DeleteGroups (confluent-kafka AdminClient): GROUP_ID_NOT_FOUND afterwards, and a consumer of
  the group created again starts fresh (``latest``, the default: nothing to read).

Before: each of the three answered INVALID_REQUEST ("not served in cluster mode yet"), and
DeleteGroups of a share group in cluster mode went to the classic coordinator
(GROUP_ID_NOT_FOUND).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import kafka_clients as kc
from cluster_procs import brokers
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make
from test_cluster_share_groups import SESSION, TOPIC, _coordinator, _leader, poll_records, share_consumer


def _req(bootstrap: str, key: int, cls: str, **fields: Any) -> Any:
    with ProtocolClient(bootstrap) as c:
        v = c.version_for(key)
        m = c.classes(key, v)
        return c.request(key, make(m[cls], **{k: (f(m) if callable(f) else f) for k, f in fields.items()}), version=v)


def _alter(bootstrap: str, group: str, offset: int) -> int:
    res = _req(bootstrap, apis.ALTER_SHARE_GROUP_OFFSETS, "AlterShareGroupOffsetsRequest", group_id=group,
               topics=lambda m: (make(m["AlterShareGroupOffsetsRequestTopic"], topic_name=TOPIC, partitions=(
                   make(m["AlterShareGroupOffsetsRequestPartition"], partition_index=0, start_offset=offset),)),))
    if res.error_code == ErrorCode.none:
        assert res.responses[0].partitions[0].error_code == ErrorCode.none, res
    return int(res.error_code)


def _delete_offsets(bootstrap: str, group: str) -> int:
    res = _req(bootstrap, apis.DELETE_SHARE_GROUP_OFFSETS, "DeleteShareGroupOffsetsRequest", group_id=group,
               topics=lambda m: (make(m["DeleteShareGroupOffsetsRequestTopic"], topic_name=TOPIC),))
    if res.error_code == ErrorCode.none:
        assert res.responses[0].error_code == ErrorCode.none, res
    return int(res.error_code)


def _describe(bootstrap: str, group: str) -> Any:
    res = _req(bootstrap, apis.DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsetsRequest",
               groups=lambda m: (make(m["DescribeShareGroupOffsetsRequestGroup"], group_id=group, topics=None),))
    return res.groups[0]


def _starts(bootstrap: str, group: str) -> dict[int, int]:
    g = _describe(bootstrap, group)
    assert g.error_code == ErrorCode.none, g
    return {p.partition_index: p.start_offset for t in g.topics for p in t.partitions}


def _consume(bootstrap: str, group: str, want: int, timeout: float = 40) -> list[int]:
    """A new ShareConsumer accepts what it gets (up to ``want`` records or ``timeout``), commits, closes."""
    from confluent_kafka import AcknowledgeType

    c = share_consumer(bootstrap, group)
    got: list[int] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for m in poll_records(c, 0.5):
                got.append(m.offset())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(30)
    finally:
        c.close()
    return got


def _until_none(call: Any, what: str, timeout: float = 30) -> None:
    """``call()`` until it answers NONE (NON_EMPTY_GROUP while the member's leave is processed)."""
    deadline = time.monotonic() + timeout
    code = call()
    while code != ErrorCode.none and time.monotonic() < deadline:
        time.sleep(0.3)
        code = call()
    assert code == ErrorCode.none, f"{what}: {ErrorCode(code).name}"


def test_share_group_offsets_are_altered_and_deleted_on_the_coordinator_and_the_leader_follows(
        pg_dsn: str, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    with brokers(pg_dsn, tmp_path, SESSION, (1, 2)) as procs:
        bootstrap = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", bootstrap, TOPIC, 1)
        leader = _leader(bootstrap)
        # a group coordinated by the broker that does not lead the partition
        group = next(g for g in (f"sg-admin-{i}" for i in range(64)) if _coordinator(bootstrap, g) != leader)
        a = next(b.bootstrap for b in procs if b.node_id != leader)  # the group's coordinator
        b = next(b.bootstrap for b in procs if b.node_id == leader)  # the partition's leader
        kc.produce("confluent", bootstrap, TOPIC, [(0, None, b"v%d" % i) for i in range(50)])
        admin = AdminClient({"bootstrap.servers": bootstrap})
        res = ConfigResource("GROUP", group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(30)

        member = share_consumer(bootstrap, group)
        try:
            from confluent_kafka import AcknowledgeType

            got: list[int] = []
            deadline = time.monotonic() + 60
            while len(got) < 50 and time.monotonic() < deadline:
                for m in poll_records(member, 0.5):
                    got.append(m.offset())
                    member.acknowledge(m, AcknowledgeType.ACCEPT)
            member.commit_sync(30)
            assert sorted(got) == list(range(50))
            assert _starts(a, group) == {0: 50} and _starts(b, group) == {0: 50}
            assert _alter(a, group, 10) == ErrorCode.non_empty_group  # Kafka: only an empty group
            assert _delete_offsets(a, group) == ErrorCode.non_empty_group
            assert _alter(b, group, 10) == ErrorCode.not_coordinator
        finally:
            member.close()

        _until_none(lambda: _alter(a, group, 40), "AlterShareGroupOffsets of the empty group")
        assert _starts(a, group) == {0: 40} and _starts(b, group) == {0: 40}  # the store's, on either broker
        assert sorted(_consume(bootstrap, group, 10)) == list(range(40, 50))  # B follows: starts at 40
        assert _starts(a, group) == {0: 50}

        _until_none(lambda: _delete_offsets(a, group), "DeleteShareGroupOffsets of the empty group")
        assert _starts(b, group) == {}
        assert sorted(_consume(bootstrap, group, 50)) == list(range(50))  # earliest again

        deadline = time.monotonic() + 30  # the last consumer's leave is processed
        while True:
            try:
                admin.delete_consumer_groups([group])[group].result(30)
                break
            except Exception:  # noqa: BLE001 - NON_EMPTY_GROUP until the member has left
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        for bs in (a, b):
            assert _describe(bs, group).error_code == ErrorCode.group_id_not_found
        assert _consume(bootstrap, group, 1, timeout=4) == []  # created again: latest (its configs went too)
        assert _starts(a, group) == {0: 50}


def test_a_leader_cannot_write_over_an_administrators_change(pg_dsn: str) -> None:
    """The store layer: a leader's write names the row version it loaded; after an
    administrator's write (replace, delete, delete and create again) it is refused and changes
    nothing; read again, the leader writes."""
    import uuid

    import psycopg
    import pytest

    from oncelog.cluster.connection import StoreConnection
    from oncelog.cluster.schema import ensure_schema
    from oncelog.cluster.share_state import SnapshotRow, StaleShareState, StoreShareState

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ensure_schema(conn)
        conn.execute("INSERT INTO oncelog_partition (topic, partition, leader_broker, leader_epoch) VALUES ('t', 0, 1, 3)")
    tid = uuid.uuid4()
    leader = StoreShareState(StoreConnection(lambda: psycopg.connect(pg_dsn, autocommit=True)), node_id=1)
    admin = StoreShareState(StoreConnection(lambda: psycopg.connect(pg_dsn, autocommit=True)), node_id=2)
    try:
        assert leader.load_versioned("g", tid, 0) == (None, 0)
        v1 = leader.write([SnapshotRow("g", tid, "t", 0, 3, b"s1", 0)])[("g", tid, 0)]
        with pytest.raises(StaleShareState):  # a second "first" write: the row is there now
            leader.write([SnapshotRow("g", tid, "t", 0, 3, b"s1b", 0)])
        v2 = leader.write([SnapshotRow("g", tid, "t", 0, 3, b"s2", v1)])[("g", tid, 0)]
        assert leader.load_versioned("g", tid, 0) == (b"s2", v2) and v2 != v1
        admin.admin_write("g", {(tid, 0): b"altered"})
        with pytest.raises(StaleShareState):
            leader.write([SnapshotRow("g", tid, "t", 0, 3, b"stale", v2)])
        state, v3 = leader.load_versioned("g", tid, 0)
        assert state == b"altered" and leader.versions("g") == {(tid, 0): v3}
        admin.admin_write("g", {}, whole_group=True)  # deleted, then created again by an alter
        assert not admin.has_group("g")
        admin.admin_write("g", {(tid, 0): b"again"})
        with pytest.raises(StaleShareState):  # never the version it had before the delete
            leader.write([SnapshotRow("g", tid, "t", 0, 3, b"stale", v3)])
        assert admin.load_group("g") == {(tid, 0): b"again"}
        v4 = leader.load_versioned("g", tid, 0)[1]
        assert leader.write([SnapshotRow("g", tid, "t", 0, 3, b"s4", v4)])[("g", tid, 0)] > v4
    finally:
        leader.conn.drop()
        admin.conn.drop()

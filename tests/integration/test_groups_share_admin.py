"""Share-group administration (KIP-932, issue 30) against a real broker: ListGroups lists a share
group with type ``share``; ShareGroupDescribe shows its members; DescribeShareGroupOffsets its
start offset and lag; AlterShareGroupOffsets moves it (refused while members run) and the next
consumer starts there; DeleteShareGroupOffsets makes it start over per
``share.auto.offset.reset``; ``oncelog groups describe`` shows all of it.

Before issue 30 none of these APIs was served (the connection was closed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make
from test_groups_share import FAST, poll_records, set_group_configs, share_consumer

pytestmark = pytest.mark.integration


def _req(c: ProtocolClient, key: int, cls: str, **fields: Any) -> Any:
    v = c.version_for(key)
    m = c.classes(key, v)
    return c.request(key, make(m[cls], **{k: (f(m) if callable(f) else f) for k, f in fields.items()}), version=v)


def _describe_offsets(bootstrap: str, group: str) -> dict[int, tuple[int, int]]:
    with ProtocolClient(bootstrap) as c:
        res = _req(c, apis.DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsetsRequest",
                   groups=lambda m: (make(m["DescribeShareGroupOffsetsRequestGroup"], group_id=group, topics=None),))
    g = res.groups[0]
    assert g.error_code == ErrorCode.none, g
    return {p.partition_index: (p.start_offset, p.lag) for t in g.topics for p in t.partitions}


def _alter(bootstrap: str, group: str, topic: str, offset: int) -> Any:
    with ProtocolClient(bootstrap) as c:
        return _req(c, apis.ALTER_SHARE_GROUP_OFFSETS, "AlterShareGroupOffsetsRequest", group_id=group,
                    topics=lambda m: (make(m["AlterShareGroupOffsetsRequestTopic"], topic_name=topic, partitions=(
                        make(m["AlterShareGroupOffsetsRequestPartition"], partition_index=0, start_offset=offset),)),))


def _consume(bootstrap: str, group: str, topic: str, want: int, timeout: float = 30) -> list[int]:
    c = share_consumer(bootstrap, group, [topic])
    got: list[int] = []
    try:
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            got += [m.offset() for m in poll_records(c, 0.5)]
        c.commit_sync(30)
    finally:
        c.close()
    return got


def test_list_describe_alter_delete_share_group_offsets(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory("share-admin", FAST)
    create_topic("confluent", b.bootstrap, "qa", 1)
    produce("confluent", b.bootstrap, "qa", [(0, None, b"v%d" % i) for i in range(50)])
    set_group_configs(b.bootstrap, "sga", {"share.auto.offset.reset": "earliest"})
    member = share_consumer(b.bootstrap, "sga", ["qa"])
    try:
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += [m.offset() for m in poll_records(member, 0.5)]
        member.commit_sync(30)
        assert sorted(got) == list(range(50))
        with ProtocolClient(b.bootstrap) as c:
            listed = _req(c, apis.LIST_GROUPS, "ListGroupsRequest", states_filter=(), types_filter=("share",))
            desc = _req(c, apis.SHARE_GROUP_DESCRIBE, "ShareGroupDescribeRequest", group_ids=("sga", "nope"),
                        include_authorized_operations=False)
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [("sga", "share", "Stable")]
        sga, nope = desc.groups
        assert sga.error_code == ErrorCode.none and len(sga.members) == 1
        assert [t.topic_name for t in sga.members[0].assignment.topic_partitions] == ["qa"]
        assert nope.error_code == ErrorCode.group_id_not_found
        assert _describe_offsets(b.bootstrap, "sga") == {0: (50, 0)}
        assert _alter(b.bootstrap, "sga", "qa", 10).error_code == ErrorCode.non_empty_group
        out = subprocess.run([sys.executable, "-m", "oncelog", "groups", "describe", "sga", "-b", b.bootstrap],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"})
        assert out.returncode == 0, out.stderr
        assert "share group (KIP-932)" in out.stdout and "qa" in out.stdout, out.stdout
    finally:
        member.close()
    deadline = time.monotonic() + 15  # the member's leave is processed
    while time.monotonic() < deadline and _alter(b.bootstrap, "sga", "qa", 40).error_code != ErrorCode.none:
        time.sleep(0.2)
    assert _describe_offsets(b.bootstrap, "sga") == {0: (40, 10)}
    assert sorted(_consume(b.bootstrap, "sga", "qa", 10)) == list(range(40, 50))  # starts at the altered offset
    with ProtocolClient(b.bootstrap) as c:
        res = _req(c, apis.DELETE_SHARE_GROUP_OFFSETS, "DeleteShareGroupOffsetsRequest", group_id="sga",
                   topics=lambda m: (make(m["DeleteShareGroupOffsetsRequestTopic"], topic_name="qa"),))
    assert res.error_code == ErrorCode.none and res.responses[0].error_code == ErrorCode.none
    assert _describe_offsets(b.bootstrap, "sga") == {}
    assert sorted(_consume(b.bootstrap, "sga", "qa", 50)) == list(range(50))  # earliest again
    # DeleteGroups: the share group goes with its state and configs (latest again: nothing to read)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    deadline = time.monotonic() + 15  # the last consumer's leave is processed
    while True:
        try:
            admin.delete_consumer_groups(["sga"])["sga"].result(30)
            break
        except Exception:  # noqa: BLE001 - NON_EMPTY_GROUP until the member has left
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    with ProtocolClient(b.bootstrap) as c:
        res = _req(c, apis.DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsetsRequest",
                   groups=lambda m: (make(m["DescribeShareGroupOffsetsRequestGroup"], group_id="sga", topics=None),))
    assert res.groups[0].error_code == ErrorCode.group_id_not_found
    assert _consume(b.bootstrap, "sga", "qa", 1, timeout=3) == []  # share.auto.offset.reset back to latest


def test_share_group_configs_are_described(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """DescribeConfigs on a GROUP resource: the share group's own values and the defaults; a
    config a share group does not have is INVALID_CONFIG."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    b = broker_factory("share-configs", FAST)
    set_group_configs(b.bootstrap, "sgc", {"share.isolation.level": "read_committed"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource("GROUP", "sgc")
    configs = admin.describe_configs([res])[res].result(30)
    assert configs["share.isolation.level"].value == "read_committed"
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.record.lock.duration.ms"].value == "30000"
    with pytest.raises(Exception, match="INVALID_CONFIG|unknown group config"):
        set_group_configs(b.bootstrap, "sgc", {"share.no.such.config": "1"})
    with pytest.raises(Exception, match="INVALID_CONFIG|ISO-8601"):
        set_group_configs(b.bootstrap, "sgc", {"share.auto.offset.reset": "by_duration:1H"})
    with pytest.raises(Exception, match="INVALID_CONFIG|one of"):
        set_group_configs(b.bootstrap, "sgc", {"share.auto.offset.reset": "newest"})


def test_auto_offset_reset_by_duration_starts_at_the_first_record_that_recent(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """``share.auto.offset.reset=by_duration:PT1H``: a new share partition starts at the first
    record whose timestamp is within the last hour (ListOffsets by time), not at the log start
    nor at its end."""
    from confluent_kafka import Producer

    b = broker_factory("share-by-duration", FAST)
    create_topic("confluent", b.bootstrap, "qd", 1)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(10):  # 0..4 two hours old, 5..9 a minute old
        p.produce("qd", b"v%d" % i, partition=0, timestamp=now - (7_200_000 if i < 5 else 60_000))
        p.flush(30)
    set_group_configs(b.bootstrap, "sgd", {"share.auto.offset.reset": "by_duration:PT1H"})
    assert sorted(_consume(b.bootstrap, "sgd", "qd", 5)) == list(range(5, 10))

"""Share groups (KIP-932, issue 30) with confluent-kafka 2.16's ShareConsumer against a real
broker process: several consumers share one partition and each record is delivered to one of
them and acknowledged once; RELEASE redelivers with a higher delivery count; REJECT archives;
an expired acquisition lock redelivers; the delivery-count limit archives; read_committed never
delivers an aborted or an open transaction's records; the state survives a broker SIGKILL.

Before issue 30 a ShareConsumer got nothing: ApiVersions had no ShareGroupHeartbeat (76).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_clients import create_topic, produce

pytestmark = pytest.mark.integration

#: fast member sessions and short locks, so the tests do not wait Kafka's 30 s and 45 s
FAST = {"group.share.heartbeat.interval.ms": "500", "group.share.session.timeout.ms": "6000"}


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """The share group's configs (IncrementalAlterConfigs on a GROUP resource), as an operator sets them."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("GROUP", group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def share_consumer(bootstrap: str, group: str, topics: list[str], *, explicit: bool = False) -> Any:
    from confluent_kafka import ShareConsumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(conf)
    c.subscribe(topics)
    return c


def poll_records(c: Any, timeout: float = 1.0) -> list[Any]:
    msgs = c.poll(timeout)
    return [m for m in (msgs or []) if m.error() is None]


def _wait_until_all_are_members(bootstrap: str, group: str, consumers: list[Any], deadline_s: float = 60) -> None:
    """Poll every consumer (the topic is still empty) until ShareGroupDescribe shows each of them
    a member with an assignment: on a loaded machine a late joiner would otherwise find the work
    already done, whatever the broker's fairness."""
    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis
    from oncelog.protocol.messages import make

    deadline = time.monotonic() + deadline_s
    with ProtocolClient(bootstrap) as pc:
        v = pc.version_for(apis.SHARE_GROUP_DESCRIBE)
        m = pc.classes(apis.SHARE_GROUP_DESCRIBE, v)
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.1)
            g = pc.request(apis.SHARE_GROUP_DESCRIBE, make(m["ShareGroupDescribeRequest"], group_ids=(group,),
                                                           include_authorized_operations=False), version=v).groups[0]
            if len(g.members) == len(consumers) and all(mb.assignment.topic_partitions for mb in g.members):
                return
    pytest.fail(f"{len(consumers)} share consumers did not all join {group} in {deadline_s} s")


def _earliest_group(b: Any, group: str, **more: str) -> None:
    set_group_configs(b.bootstrap, group, {"share.auto.offset.reset": "earliest", **more})


def test_consumers_sharing_one_partition_each_record_once(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """Four implicit-mode consumers on one partition: every record reaches exactly one of them,
    at delivery count 1 (each acknowledged once: none redelivered), and all of them take part."""
    b = broker_factory("share-many", FAST)
    create_topic("confluent", b.bootstrap, "q1", 1)
    n = 2000
    # batches of 10: a share fetch acquires whole batches, so small ones let every consumer get some
    produce("confluent", b.bootstrap, "q1", [(0, None, b"v%d" % i) for i in range(n)],
            extra={"batch.num.messages": 10})
    _earliest_group(b, "sg1")
    consumers = [share_consumer(b.bootstrap, "sg1", ["q1"]) for _ in range(4)]
    seen: dict[int, int] = {}
    per_consumer = [0] * len(consumers)
    try:
        deadline = time.monotonic() + 90
        while len(seen) < n and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                for m in poll_records(c, 0.2):
                    seen[m.offset()] = seen.get(m.offset(), 0) + 1
                    per_consumer[i] += 1
                    assert m.delivery_count() == 1, f"offset {m.offset()} redelivered"
        for c in consumers:  # the last polls' records are accepted on commit
            c.commit_sync(30)
    finally:
        for c in consumers:
            c.close()
    assert sorted(seen) == list(range(n))
    assert set(seen.values()) == {1}, {o: k for o, k in seen.items() if k > 1}
    assert sum(1 for k in per_consumer if k) >= 2, per_consumer  # the partition really is shared


def test_release_redelivers_with_a_higher_count_and_reject_archives(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import AcknowledgeType

    b = broker_factory("share-acks", FAST)
    create_topic("confluent", b.bootstrap, "q2", 1)
    produce("confluent", b.bootstrap, "q2", [(0, None, b"v%d" % i) for i in range(10)])
    _earliest_group(b, "sg2")
    c = share_consumer(b.bootstrap, "sg2", ["q2"], explicit=True)
    deliveries: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + 60
        accepted: set[int] = set()
        while len(accepted) < 8 and time.monotonic() < deadline:
            for m in poll_records(c, 0.5):
                deliveries.append((m.offset(), m.delivery_count()))
                if m.offset() == 3 and m.delivery_count() == 1:
                    c.acknowledge(m, AcknowledgeType.RELEASE)  # comes back, count 2
                elif m.offset() in (5, 6):
                    c.acknowledge(m, AcknowledgeType.REJECT)  # never again
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    accepted.add(m.offset())
            c.commit_sync(30)
        # nothing more comes: every record is accepted or archived
        end = time.monotonic() + 3
        while time.monotonic() < end:
            extra = poll_records(c, 0.5)
            for m in extra:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            assert not extra, [(m.offset(), m.delivery_count()) for m in extra]
    finally:
        c.close()
    assert accepted == set(range(10)) - {5, 6}
    assert (3, 1) in deliveries and (3, 2) in deliveries
    assert [d for d in deliveries if d[0] in (5, 6)] == [(5, 1), (6, 1)]


def test_lock_timeout_redelivers_and_the_delivery_limit_archives(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """A consumer that holds its records past the lock loses them: another gets them with a
    higher delivery count; a record released every time is archived at the delivery limit."""
    from confluent_kafka import AcknowledgeType

    b = broker_factory("share-locks", FAST)
    create_topic("confluent", b.bootstrap, "q3", 1)
    produce("confluent", b.bootstrap, "q3", [(0, None, b"v%d" % i) for i in range(5)])
    _earliest_group(b, "sg3", **{"share.record.lock.duration.ms": "2000", "share.delivery.count.limit": "3"})
    slow = share_consumer(b.bootstrap, "sg3", ["q3"], explicit=True)
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = poll_records(slow, 0.5)
        assert [m.delivery_count() for m in got] == [1] * len(got) and got
        held = {m.offset() for m in got}
        # the slow consumer stalls (acknowledges nothing) past the 2 s lock
        fast = share_consumer(b.bootstrap, "sg3", ["q3"], explicit=True)
        try:
            counts: dict[int, list[int]] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (held <= set(counts) and all(
                    max(counts[o]) >= 2 for o in held)):
                for m in poll_records(fast, 0.5):
                    counts.setdefault(m.offset(), []).append(m.delivery_count())
                    # offset 0 is released every time: archived at the limit (3 deliveries)
                    c_type = AcknowledgeType.RELEASE if m.offset() == 0 else AcknowledgeType.ACCEPT
                    fast.acknowledge(m, c_type)
                fast.commit_sync(30)
            assert all(max(counts[o]) >= 2 for o in held), counts  # redelivered after the lock expired
            end = time.monotonic() + 8
            while time.monotonic() < end and len(counts.get(0, [])) < 3:
                for m in poll_records(fast, 0.5):
                    counts.setdefault(m.offset(), []).append(m.delivery_count())
                    fast.acknowledge(m, AcknowledgeType.RELEASE if m.offset() == 0 else AcknowledgeType.ACCEPT)
                fast.commit_sync(30)
            end = time.monotonic() + 4
            while time.monotonic() < end:  # archived: never delivered a 4th time
                for m in poll_records(fast, 0.5):
                    counts.setdefault(m.offset(), []).append(m.delivery_count())
                    fast.acknowledge(m, AcknowledgeType.ACCEPT)
                fast.commit_sync(30)
            assert counts[0] == [2, 3], counts  # 1: to the slow consumer; 2 and 3 here; then archived
        finally:
            fast.close()
    finally:
        slow.close()


def test_read_committed_never_delivers_aborted_or_open_transactions(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    b = broker_factory("share-txn", FAST)
    create_topic("confluent", b.bootstrap, "q4", 1)
    _earliest_group(b, "sg4", **{"share.isolation.level": "read_committed"})

    def txn(tid: str) -> Any:
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
        p.init_transactions(30)
        return p

    committed = txn("t-committed")
    aborted = txn("t-aborted")
    open_ = txn("t-open")
    committed.begin_transaction()
    for i in range(5):
        committed.produce("q4", b"committed-%d" % i, partition=0)
    committed.commit_transaction(30)
    aborted.begin_transaction()
    for i in range(5):
        aborted.produce("q4", b"aborted-%d" % i, partition=0)
    aborted.flush(30)
    aborted.abort_transaction(30)
    open_.begin_transaction()
    open_.produce("q4", b"open-0", partition=0)
    open_.flush(30)  # on the broker, never committed while the consumer runs
    committed.begin_transaction()
    for i in range(5, 8):
        committed.produce("q4", b"committed-%d" % i, partition=0)
    committed.commit_transaction(30)  # after the open transaction: held back by the LSO
    produce("confluent", b.bootstrap, "q4", [(0, None, b"plain")])  # also after the LSO

    c = share_consumer(b.bootstrap, "sg4", ["q4"])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            values += [m.value() for m in poll_records(c, 0.5)]
        assert sorted(values) == sorted(b"committed-%d" % i for i in range(5)), values
        open_.commit_transaction(30)  # the LSO moves: the rest is delivered, the aborted never
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(values) < 10:
            values += [m.value() for m in poll_records(c, 0.5)]
        c.commit_sync(30)
    finally:
        c.close()
    assert sorted(values) == sorted([b"committed-%d" % i for i in range(8)] + [b"open-0", b"plain"]), values


_HOLDER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    got = [m.offset() for m in (c.poll(0.5) or []) if m.error() is None]
    if got:
        print(" ".join(map(str, got)), flush=True)
        break
time.sleep(600)  # holds its records until it is killed
"""


def test_a_consumer_killed_with_records_acquired_loses_them_to_the_others(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """A consumer process SIGKILLed while it holds records: when its session times out
    (group.share.session.timeout.ms, 6 s here; the lock is 30 s) the broker releases them and
    another consumer gets them, delivery count 2; nothing is lost."""
    import signal
    import subprocess
    import sys

    b = broker_factory("share-dead", FAST)
    create_topic("confluent", b.bootstrap, "q6", 1)
    produce("confluent", b.bootstrap, "q6", [(0, None, b"v%d" % i) for i in range(10)])
    _earliest_group(b, "sg6")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, b.bootstrap, "sg6", "q6"], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = holder.stdout.readline() if holder.stdout else ""  # bounded: the holder gives up after 60 s
        held = {int(x) for x in line.split()}
        assert held, "the holder got nothing"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
        c = share_consumer(b.bootstrap, "sg6", ["q6"])
        counts: dict[int, int] = {}
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and len(counts) < 10:
                for m in poll_records(c, 0.5):
                    counts[m.offset()] = m.delivery_count()
            c.commit_sync(30)
        finally:
            c.close()
        waited = time.monotonic() - killed_at
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
    assert sorted(counts) == list(range(10)), counts
    assert all(counts[o] == 2 for o in held), (held, counts)  # redelivered once the member was gone
    assert waited < 25, f"{waited:.1f} s: released by the 30 s lock, not by the session timeout"


def test_at_the_lock_limit_every_consumer_gets_its_turn(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """``group.share.partition.max.record.locks`` (200 here) is reached by the first consumer's
    fetch: the others wait for room, and get it in turn. Before the turns, the consumer that
    freed room by acknowledging took it back in the same request, every time: the others got
    nothing at all."""
    b = broker_factory("share-turns", {**FAST, "group.share.partition.max.record.locks": "200"})
    create_topic("confluent", b.bootstrap, "q7", 1)
    n = 3000
    _earliest_group(b, "sg7")
    consumers = [share_consumer(b.bootstrap, "sg7", ["q7"]) for _ in range(4)]
    per = [0] * len(consumers)
    seen: set[int] = set()
    try:
        _wait_until_all_are_members(b.bootstrap, "sg7", consumers)
        produce("confluent", b.bootstrap, "q7", [(0, None, b"v%d" % i) for i in range(n)], extra={"batch.num.messages": 10})
        deadline = time.monotonic() + 90
        while len(seen) < n and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                got = poll_records(c, 0.1)
                per[i] += len(got)
                seen.update(m.offset() for m in got)
        for c in consumers:
            c.commit_sync(30)
    finally:
        for c in consumers:
            c.close()
    assert len(seen) == n
    assert all(k > 0 for k in per), per


def test_two_members_on_four_partitions_both_receive_records(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """librdkafka's 0172 ``do_test_mixed_ack_mode_same_group``: an implicit and an explicit member
    of one group on a topic of 4 partitions, created together and polled in turn, share the 400
    records, each getting some. Kafka's simple assignor gives each member 2 partitions
    (coordinator/share/assignor.py). Before: every member was assigned every partition and the
    first to poll acquired all 400 (0 to the other)."""
    from confluent_kafka import AcknowledgeType

    b = broker_factory("share-assign", FAST)
    create_topic("confluent", b.bootstrap, "q8", 4)
    produce("confluent", b.bootstrap, "q8", [(i % 4, None, b"v%d" % i) for i in range(400)])
    _earliest_group(b, "sg8")
    implicit = share_consumer(b.bootstrap, "sg8", ["q8"])
    explicit = share_consumer(b.bootstrap, "sg8", ["q8"], explicit=True)
    got = {"implicit": 0, "explicit": 0}
    seen: set[tuple[int, int]] = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 400 and time.monotonic() < deadline:
            for m in poll_records(implicit, 1.0):
                got["implicit"] += 1
                seen.add((m.partition(), m.offset()))
            for m in poll_records(explicit, 1.0):
                explicit.acknowledge(m, AcknowledgeType.ACCEPT)
                got["explicit"] += 1
                seen.add((m.partition(), m.offset()))
        explicit.commit_sync(30)
        poll_records(implicit, 1.0)  # the implicit member's last records are accepted by this poll
    finally:
        implicit.close()
        explicit.close()
    print(f"records per member: {got}")
    assert len(seen) == 400 and sum(got.values()) == 400, got
    assert got["implicit"] > 0 and got["explicit"] > 0, got

"""A broker out of file descriptors refuses the topic it cannot open and keeps serving (R22).

Found by the benchmark suite (issue 7): after thousands of partitions a broker hit its
open-files limit and CreateTopics answered UNKNOWN_SERVER_ERROR with the topic half created.
Now the creation is rolled back and answered KAFKA_STORAGE_ERROR; everything else goes on.
"""

from __future__ import annotations

import datetime
import socket
import sys
from pathlib import Path
from typing import Callable

from kafka_clients import consume, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol.messages import make
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode

#: Enough for the internal topics (100 partitions, 3 descriptors each) and a few more; not for
#: another 100 partitions.
FD_LIMIT = 450


class LimitedBroker(BrokerProcess):
    """`oncelog broker` with soft and hard RLIMIT_NOFILE set to FD_LIMIT before it starts."""

    def command(self) -> list[str]:
        inner = super().command()
        prog = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, {FD_LIMIT})); "
            "os.execv(sys.argv[1], sys.argv[1:])"
        )
        return [sys.executable, "-c", prog, *inner]


def create_raw(bootstrap: str, name: str, partitions: int) -> int:
    with ProtocolClient(bootstrap, timeout=60) as c:
        m = c.classes(apis.CREATE_TOPICS)
        t = make(m["CreatableTopic"], name=name, num_partitions=partitions, replication_factor=1,
                 assignments=(), configs=())
        resp = c.request(apis.CREATE_TOPICS, make(m["CreateTopicsRequest"], topics=(t,), timeout=datetime.timedelta(seconds=30),
                                                  validate_only=False))
        return int(resp.topics[0].error_code)


def topics_of(bootstrap: str) -> set[str]:
    with ProtocolClient(bootstrap, timeout=30) as c:
        m = c.classes(apis.METADATA)
        resp = c.request(apis.METADATA, make(m["MetadataRequest"], topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        return {t.name for t in resp.topics}


def test_topic_beyond_the_descriptor_limit_is_refused_and_the_broker_goes_on(tmp_path: Path) -> None:
    b = LimitedBroker(tmp_path / "broker", overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start(timeout=60)
    try:
        assert create_raw(b.bootstrap, "too-big", 100) == ErrorCode.kafka_storage_error
        assert "too-big" not in topics_of(b.bootstrap)  # rolled back, not half there
        assert "Too many open files" in b.log_tail(20_000)

        create_topic("confluent", b.bootstrap, "small", 2)
        acked = produce("confluent", b.bootstrap, "small", [(i % 2, None, b"v%d" % i) for i in range(200)])
        assert len(acked) == 200
        got = consume("confluent", b.bootstrap, "small", [0, 1], expected=200)
        assert sorted(r[3] for r in got) == sorted(b"v%d" % i for i in range(200))
    finally:
        assert b.stop() == 0, b.log_tail()
    # and it starts again from that data dir
    b.start(timeout=60)
    try:
        assert topics_of(b.bootstrap) >= {"small"}
        assert "too-big" not in topics_of(b.bootstrap)
    finally:
        assert b.stop() == 0, b.log_tail()


def test_out_of_descriptors_new_connections_are_refused_at_once_without_a_log_storm(tmp_path: Path) -> None:
    """Before: at the limit new connections waited in the backlog until they timed out, and
    the accept loop logged "out of system resource" thousands of times a second."""
    import socket
    import time

    b = LimitedBroker(tmp_path / "broker", overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start(timeout=60)
    held: list[socket.socket] = []
    try:
        refused_at = None
        for i in range(FD_LIMIT):  # bounded: the broker runs out long before
            s = socket.create_connection((b.host, b.port), timeout=5)
            s.settimeout(2)
            s.sendall(b"\x00\x00\x00\x0e" + bytes.fromhex("00030001") + i.to_bytes(4, "big") + b"\xff\xff" + b"\x00" * 4)
            try:
                answered = len(s.recv(4, socket.MSG_WAITALL)) == 4
            except (TimeoutError, ConnectionResetError):
                answered = False
            if not answered:
                refused_at = i
                s.close()
                break
            held.append(s)
        assert refused_at is not None, "the broker never ran out of descriptors"
        t0 = time.monotonic()
        for _ in range(200):  # many more attempts: each refused at once
            s = socket.create_connection((b.host, b.port), timeout=5)
            s.settimeout(5)
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
            s.close()
        assert time.monotonic() - t0 < 30
        for s in held[:20]:
            s.close()
        time.sleep(1)
        create_topic("confluent", b.bootstrap, "after", 1)  # served again once descriptors free up
        log = b.log_tail(2_000_000)
        storm = sum(1 for line in log.splitlines() if "descriptor" in line or "out of system resource" in line)
        assert 1 <= storm <= 30, storm
    finally:
        for s in held:
            s.close()
        assert b.stop() == 0, b.log_tail()


def created_then_stopped(b: BrokerProcess, name: str, partitions: int) -> None:
    """Start ``b``, create topic ``name`` with ``partitions`` partitions, stop ``b`` cleanly."""
    b.start(timeout=60)
    try:
        assert create_raw(b.bootstrap, name, partitions) == ErrorCode.none
    finally:
        assert b.stop() == 0, b.log_tail()


def killed_by_its_crash_point(b: BrokerProcess, request: Callable[[], object]) -> None:
    """Start ``b`` (its ``ONCELOG_CRASH_POINT`` set), send ``request``, which reaches the crash
    point, and see the broker die of a real SIGKILL (faults.py) while it is under way."""
    b.start(timeout=60)
    try:
        try:
            request()
        except (OSError, EOFError, socket.timeout, ConnectionError):
            pass  # the broker was killed mid-request
        assert b.proc is not None
        assert b.proc.wait(timeout=30) == -9, "the fault point did not kill the broker"
    finally:
        b.kill()


def test_sigkill_during_a_creation_beyond_the_limit_never_bricks_the_data_dir(tmp_path: Path) -> None:
    """Issue 26 row 10. Before: topics.json named the topic before its directories existed, so a
    SIGKILL while a creation refused for the descriptor limit was under way left a topic that
    every later start, under the same limit, failed to open ("Too many open files"). Now the
    partitions are opened first and topics.json is written last: the interrupted creation leaves
    only directories, which the next start removes. The kill is a real SIGKILL of the broker
    process at a fault-injection point (faults.py) after the new topic's first partition opened."""
    data = tmp_path / "broker"
    b = LimitedBroker(data, overrides={"group.initial.rebalance.delay.ms": "0"},
                      env={"ONCELOG_CRASH_POINT": "create_topics.partition_opened"})
    killed_by_its_crash_point(b, lambda: create_raw(b.bootstrap, "too-big", 100))
    again = LimitedBroker(data, port=b.port, overrides={"group.initial.rebalance.delay.ms": "0"})
    for attempt in range(2):  # twice: the first start cleans up, the second finds nothing to clean
        again.start(timeout=60)  # before: "broker exited with 1 ... Too many open files"
        try:
            assert "too-big" not in topics_of(again.bootstrap)
            if attempt == 0:
                create_topic("confluent", again.bootstrap, "small", 2)
            acked = produce("confluent", again.bootstrap, "small", [(i % 2, None, b"v%d" % i) for i in range(20)])
            assert len(acked) == 20
        finally:
            assert again.stop() == 0, again.log_tail()
    assert not [p for p in data.iterdir() if p.name.startswith("too-big-")]


def test_sigkill_while_growing_a_topic_beyond_the_limit_never_bricks_the_data_dir(tmp_path: Path) -> None:
    """CreatePartitions, as CreateTopics above: before, topics.json had the new partition count
    before the new partitions were opened, so a SIGKILL while growing beyond the descriptor
    limit left a count no later start could open. Now the count is written last."""
    data = tmp_path / "broker"
    b = LimitedBroker(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    created_then_stopped(b, "grows", 2)
    killed = LimitedBroker(data, port=b.port, overrides={"group.initial.rebalance.delay.ms": "0"},
                           env={"ONCELOG_CRASH_POINT": "create_partitions.partition_opened"})

    def grow() -> None:
        with ProtocolClient(killed.bootstrap, timeout=60) as c:
            m = c.classes(apis.CREATE_PARTITIONS, 3)
            c.request(apis.CREATE_PARTITIONS, make(m["CreatePartitionsRequest"], topics=(
                make(m["CreatePartitionsTopic"], name="grows", count=102, assignments=None),),
                timeout=datetime.timedelta(seconds=30), validate_only=False), version=3)

    killed_by_its_crash_point(killed, grow)
    again = LimitedBroker(data, port=b.port, overrides={"group.initial.rebalance.delay.ms": "0"})
    again.start(timeout=60)  # before: "broker exited with 1 ... Too many open files"
    try:
        acked = produce("confluent", again.bootstrap, "grows", [(i % 2, None, b"v%d" % i) for i in range(20)])
        assert len(acked) == 20
    finally:
        assert again.stop() == 0, again.log_tail()
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("grows-")) == ["grows-0", "grows-1"]


def test_a_start_short_of_descriptors_for_its_topics_stops_with_one_clear_line(tmp_path: Path) -> None:
    """Topics created under a higher limit, the broker started again under a lower one: as Kafka
    (its log directory fails to load and the broker stops) the start is refused, but with one
    line naming the partition count and the limit to raise, not a traceback."""
    data = tmp_path / "broker"
    b = BrokerProcess(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    created_then_stopped(b, "big", 150)
    limited = LimitedBroker(data, port=b.port, log_path=tmp_path / "limited.log")
    try:
        limited.start(timeout=60)
        raise AssertionError("the broker started without descriptors for its partitions")
    except RuntimeError as exc:
        assert "exited with 1" in str(exc), exc
    finally:
        limited.kill()
    log_text = (tmp_path / "limited.log").read_text()
    assert "Traceback" not in log_text, log_text[-3000:]
    line = next(line for line in log_text.splitlines() if "cannot start" in line)
    assert "ulimit -Hn" in line and "250 partitions" in line, line

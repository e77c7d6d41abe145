"""Coordinator and store faults across three brokers on one real PostgreSQL (issue 15, R19).

* The transaction coordinator SIGKILLs itself (``ONCELOG_CRASH_POINT``) at each step of EndTxn
  (before Prepare*, after Prepare*, after the markers, after Complete*) while committing a
  transaction that wrote to partitions led by all three brokers and sent offsets to a group.
  Its ``__transaction_state`` partition moves to a live broker, which loads it and finishes the
  transaction; a read_committed consumer and the group's committed offsets see it all or
  nothing (committed from Prepare* on), a new producer with the same transactional id fences
  the old one and commits, and a later transaction is readable on every partition (the LSO is
  not stuck). confluent-kafka at every point; kafka-python at after_markers and before_prepare
  (it never retries its EndTxn, so the latter is aborted when the new producer fences it).
* One broker reaches PostgreSQL through a proxy (oncelog_tools.verify.proxy) that is blocked
  while an idempotent producer writes: a short block (under the session) loses nothing; a
  block past the session takes the broker's partitions to the others, the cut broker answers
  nothing stale (Produce and Fetch refused), every acknowledged record is there exactly once,
  and after unblocking the broker registers again and leads its partitions again.

Every wait is bounded; all traffic is on 127.0.0.1.
"""

from __future__ import annotations

import collections
import datetime
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import kafka_clients as kc
from cluster_procs import read_from_start
from oncelog.client import ProtocolClient
from oncelog.faults import ENV as CRASH_ENV
from oncelog.process import BrokerProcess, free_port
from oncelog.protocol import apis, records
from oncelog_tools.verify.proxy import Proxy
from txn_clients import TxnProducer

SESSION_S = 2.0
SMALL = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
         "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
TOPIC = "spread"
PARTITIONS = 6
NOT_LEADER = 6


# -- helpers ------------------------------------------------------------------------------------


def _bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _start(b: BrokerProcess) -> None:
    """Start ``b``; while its previous session is live the store refuses the node id and the
    process exits: retry until the session expired (bounded, as oncelog_tools.verify.targets)."""
    for attempt in range(12):
        try:
            b.start(timeout=60)
            return
        except RuntimeError:
            if attempt == 11:
                raise
            time.sleep(SESSION_S / 2)


def _stop_all(brokers: list[BrokerProcess]) -> None:
    for b in brokers:
        try:
            b.stop(timeout=30)
        except Exception:
            b.kill()


def _coordinators(addr: str, key_type: int, keys: list[str]) -> dict[str, int]:
    """key -> coordinator node id for the keys FindCoordinator (v4, many keys) answers without
    error."""
    m = apis.message_class(apis.FIND_COORDINATOR, 4, False)
    with ProtocolClient(addr) as c:
        r = c.request(apis.FIND_COORDINATOR, m(key_type=key_type, coordinator_keys=tuple(keys)), version=4)
    return {x.key: x.node_id for x in r.coordinators if x.error_code == 0}


def _pick(addr: str, key_type: int, prefix: str, want: Callable[[int], bool], timeout: float = 30.0) -> str:
    """A key ``prefix-k`` whose coordinator satisfies ``want`` (bounded)."""
    deadline = time.monotonic() + timeout
    keys = [f"{prefix}-{k}" for k in range(40)]
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        got = _coordinators(addr, key_type, keys)
        for k in keys:
            if k in got and want(got[k]):
                return k
        time.sleep(0.2)
    raise AssertionError(f"no {prefix}-* key with the wanted coordinator in {timeout}s: {got}")


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: p.leader for p in t.partitions.values()}


def _wait_leaders(bootstrap: str, topic: str, ok: Callable[[dict[int, int]], bool], what: str,
                  timeout: float = 30.0) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    leaders: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            leaders = _leaders(bootstrap, topic)
        except Exception:  # noqa: BLE001 - a metadata request to a dying broker: ask again
            leaders = {}
        if ok(leaders):
            return leaders
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout}s; leaders {leaders}")


def _two_each(ls: dict[int, int]) -> bool:
    return len(ls) == PARTITIONS and sorted(collections.Counter(ls.values()).items()) == [(1, 2), (2, 2), (3, 2)]


def _read(bootstrap: str, topic: str, done: Callable[[list[tuple[int, int, bytes]]], bool], *,
          isolation: str = "read_committed", timeout: float = 30.0, settle: float = 0.5) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` from the beginning (assign, confluent-kafka) until ``done(out)``
    and ``settle`` more seconds, or ``timeout``."""
    return read_from_start(bootstrap, topic, PARTITIONS, done, group="faults-reader", isolation=isolation,
                           timeout=timeout, settle=settle)


def _committed(bootstrap: str, group: str, topic: str, partitions: list[int]) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in partitions], timeout=30)]
    finally:
        c.close()


# -- 1. the transaction coordinator SIGKILLed at each EndTxn step (R19) ------------------------

#: (crash point, client of the transaction, whether the group's coordinator is the victim too)
CASES = [
    ("end_txn.before_prepare", "confluent", False),
    ("end_txn.after_prepare", "confluent", True),
    ("end_txn.after_markers", "kafka-python", False),
    ("end_txn.after_complete", "confluent", True),
    # kafka-python drops its EndTxn (below): the transaction stays Ongoing at the new
    # coordinator until the new producer's InitProducerId fences and aborts it
    ("end_txn.before_prepare", "kafka-python", True),
]
VICTIM = 2
PER_PARTITION = 5


def test_transaction_coordinator_sigkilled_at_each_end_txn_step(pg_dsn: str, tmp_path: Path) -> None:
    """One cluster, node 2 the victim: for each crash point it is (re)started with
    ONCELOG_CRASH_POINT set, a transactional id it coordinates writes 5 records to each of 6
    partitions (two led by each broker) and sends offsets, and the commit kills node 2 at the
    point. The transaction must end whole on the live brokers (R19)."""
    brokers = [BrokerProcess(tmp_path / f"broker{n}", node_id=n, store=pg_dsn, overrides=SMALL,
                             env={CRASH_ENV: CASES[0][0]} if n == VICTIM else None) for n in (1, 2, 3)]
    victim = brokers[VICTIM - 1]
    live = brokers[0].bootstrap  # node 1 is never killed: FindCoordinator goes there
    report: list[str] = []
    try:
        for b in brokers:
            b.start(timeout=60)
        boot = _bootstrap(brokers)
        kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
        kc.create_topic("confluent", boot, "source", 2)
        for i, (point, client, group_on_victim) in enumerate(CASES):
            if i > 0:
                victim.env = {CRASH_ENV: point}
                _start(victim)
            _wait_leaders(boot, TOPIC, _two_each, "two partitions of the topic led by each broker")
            tid = _pick(live, 1, f"tx{i}", lambda n: n == VICTIM)
            group = _pick(live, 0, f"g{i}", (lambda n: n == VICTIM) if group_on_victim else (lambda n: n != VICTIM))
            report.append(_one_crash(boot, brokers, victim, i, point, client, tid, group, group_on_victim))
    finally:
        print("\n".join(report))
        _stop_all(brokers)


def _one_crash(boot: str, brokers: list[BrokerProcess], victim: BrokerProcess, i: int, point: str, client: str,
               tid: str, group: str, group_on_victim: bool) -> str:
    from confluent_kafka import Consumer

    started = time.monotonic()
    group_consumer = Consumer({"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False})
    p = TxnProducer(client, boot, tid)
    values = [f"t{i}-{part}-{k}".encode() for part in range(PARTITIONS) for k in range(PER_PARTITION)]
    outcome: dict[str, Any] = {}
    try:
        p.init()
        p.begin()
        for part in range(PARTITIONS):
            for k in range(PER_PARTITION):
                p.send(TOPIC, f"t{i}-{part}-{k}".encode(), partition=part)
        p.send_offsets({("source", 0): 10 + i}, group, group_consumer)
        p.flush()

        def commit() -> None:
            try:
                p.commit()
                outcome["ok"] = True
            except Exception as exc:  # noqa: BLE001 - reported and checked below
                outcome["error"] = repr(exc)

        committer = threading.Thread(target=commit, daemon=True, name=f"commit-{point}")
        committer.start()
        assert victim.proc is not None
        try:
            code = victim.proc.wait(timeout=30)
        except Exception:
            raise AssertionError(f"node {VICTIM} did not crash at {point}; log: {victim.log_tail()}") from None
        assert code == -9, f"node {VICTIM} exited with {code}"
        assert f"fault injection: SIGKILL at {point}" in victim.log_tail(200_000)
        died = time.monotonic()
        # confluent-kafka's retried EndTxn reaches the new coordinator within seconds;
        # kafka-python 3.0.12 loses its EndTxn when the first retry finds the coordinator's port
        # closed (it asked FindCoordinator while the dead broker's session was still live, so was
        # told the same broker, and never sends it again): its commit never returns. Either way
        # the new coordinator finishes the transaction by itself.
        committer.join(20 if client == "confluent" else 6)
        commit_s = time.monotonic() - died
        client_said = "ok" if outcome.get("ok") else outcome.get("error", "still waiting")

        # The coordinator moved: a new producer with the same id fences the old one (its init
        # waits for the old transaction to be finished by the new coordinator).
        survivors = _bootstrap([b for b in brokers if b is not victim])
        deadline = time.monotonic() + 20
        while (new_coord := _coordinators(brokers[0].bootstrap, 1, [tid]).get(tid)) in (None, VICTIM) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert new_coord in (1, 3), f"{point}: coordinator of {tid!r} is {new_coord}"
        if point in ("end_txn.after_prepare", "end_txn.after_markers"):
            # R19 across brokers: the new coordinator pushed the PrepareCommit on by itself.
            coord_log = brokers[new_coord - 1].log_tail(1_000_000)
            assert f"finishing transaction {tid!r} left in PrepareCommit" in coord_log, coord_log[-3000:]
        q = TxnProducer("confluent", survivors, tid)
        try:
            q.init()
            if client == "confluent":
                _zombie_is_fenced(p)
            q.begin()
            for part in range(PARTITIONS):
                q.send(TOPIC, f"later{i}-{part}".encode(), partition=part)
            q.send_offsets({("source", 1): 100 + i}, group, group_consumer)
            q.commit()
        finally:
            q.close()
    finally:
        p.close()
        group_consumer.close()

    # LSO not stuck: the later transaction is readable on every partition, bounded.
    later = {f"later{i}-{part}".encode() for part in range(PARTITIONS)}
    got = _read(survivors, TOPIC, lambda out: later <= {v for _p, _o, v in out}, timeout=30)
    seen = collections.Counter(v for _p, _o, v in got)
    missing_later = sorted(later - set(seen))
    assert not missing_later, f"{point}: read_committed stuck, later transaction missing on {missing_later}"
    mine = {v: n for v, n in seen.items() if v.startswith(f"t{i}-".encode())}
    offsets = _committed(survivors, group, "source", [0, 1])
    committed = bool(mine)
    line = (f"{point} ({client}, group on the victim: {group_on_victim}): client commit {client_said} "
            f"{commit_s:.1f}s after the crash; txn coordinator now node {new_coord}; records "
            f"{sum(mine.values())}/{len(values)}; committed offsets {offsets}; case took {time.monotonic() - started:.1f}s")
    print(line)
    # all or nothing: every record once with the offsets, or nothing and no offsets
    if committed:
        assert sorted(mine) == sorted(values) and set(mine.values()) == {1}, f"{point}: partial or duplicated: {mine}"
        assert offsets[0] == 10 + i, f"{point}: records committed but offsets {offsets}"
    else:
        assert offsets[0] < 0, f"{point}: records aborted but offsets committed {offsets}"
    assert offsets[1] == 100 + i, f"{point}: the new producer's offsets {offsets}"
    if point != "end_txn.before_prepare" or outcome.get("ok"):
        assert committed, f"{point}: transaction not committed (client said {client_said})"
    return line


def _zombie_is_fenced(p: TxnProducer) -> None:
    """The old confluent-kafka producer, fenced by a new one with its id, cannot commit."""
    from confluent_kafka import KafkaException

    try:
        p._p.begin_transaction()
        p._p.produce(TOPIC, value=b"zombie", partition=0)
        p._p.commit_transaction(20)
    except KafkaException:
        return
    raise AssertionError("a fenced producer committed a transaction")


# -- 2. a broker cut from PostgreSQL (proxy) ------------------------------------------------------


class _Writer:
    """An idempotent confluent-kafka producer (acks=all) writing continuously in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "message.timeout.ms": 60_000, "request.timeout.ms": 5000,
                           "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 1000})
        self._thread = threading.Thread(target=self._run, daemon=True, name="cut-writer")

    def _cb(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.p.produce(self.topic, value=f"v{self.sent}".encode(), partition=self.sent % PARTITIONS,
                               on_delivery=self._cb)
                self.sent += 1
            except BufferError:
                pass
            self.p.poll(0.005)

    def start(self) -> "_Writer":
        self._thread.start()
        return self

    def acked_on(self, partitions: set[int]) -> int:
        return sum(1 for p, _o, _v in self.acked if p in partitions)

    def wait_acked(self, n: int, partitions: set[int], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_on(partitions) < n:
            assert time.monotonic() < deadline, f"{what}: {self.acked_on(partitions)}/{n} acknowledged in {timeout}s"
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(10)
        left = self.p.flush(timeout)
        assert left == 0, f"{left} records not acknowledged in {timeout}s"


def _probe(addr: str, partition: int) -> tuple[int, int]:
    """(Produce error, Fetch error) of crafted requests for ``partition`` at ``addr``."""
    with ProtocolClient(addr) as c:
        m = c.classes(apis.PRODUCE, 9)
        batch = records.build_batch([(None, b"probe", ())], timestamp_ms=int(time.time() * 1000))
        req = m["ProduceRequest"](transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                                  topic_data=(m["TopicProduceData"](name=TOPIC, partition_data=(
                                      m["PartitionProduceData"](index=partition, records=batch),)),))
        produce = c.request(apis.PRODUCE, req, version=9).responses[0].partition_responses[0].error_code
        m = c.classes(apis.FETCH, 11)
        req = m["FetchRequest"](
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
            topics=(m["FetchTopic"](topic=TOPIC, partitions=(m["FetchPartition"](
                partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),))
        fetch = c.request(apis.FETCH, req, version=11).responses[0].partitions[0].error_code
    return produce, fetch


def _metadata_at(addr: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) as the broker at ``addr`` itself answers Metadata."""
    import uuid

    from oncelog.protocol.messages import make

    with ProtocolClient(addr) as c:
        m = c.classes(apis.METADATA, 12)
        md = c.request(apis.METADATA, make(m["MetadataRequest"], topics=(make(
            m["MetadataRequestTopic"], topic_id=uuid.UUID(int=0), name=TOPIC),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), version=12)
    return {p.partition_index: (p.leader_id, p.leader_epoch) for p in md.topics[0].partitions}


@pytest.fixture
def proxy(pg_server) -> Iterator[Proxy]:
    px = Proxy(free_port(), pg_server.port).start()
    try:
        yield px
    finally:
        px.close()


def test_a_broker_cut_from_postgresql_stops_answering_and_rejoins(pg_server, pg_dsn: str, proxy: Proxy,
                                                                  tmp_path: Path) -> None:
    proxied = pg_dsn.replace(f"127.0.0.1:{pg_server.port}/", f"127.0.0.1:{proxy.listen_port}/")
    assert proxied != pg_dsn
    brokers = [BrokerProcess(tmp_path / f"broker{n}", node_id=n, store=proxied if n == 3 else pg_dsn,
                             overrides=SMALL) for n in (1, 2, 3)]
    cut = brokers[2]
    writer: _Writer | None = None
    try:
        for b in brokers:
            b.start(timeout=60)
        boot = _bootstrap(brokers)
        kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
        before = _wait_leaders(boot, TOPIC, _two_each, "two partitions led by each broker")
        mine = {p for p, n in before.items() if n == 3}
        writer = _Writer(boot, TOPIC).start()
        writer.wait_acked(200, set(range(PARTITIONS)), 30, "before any cut")

        # A short cut (well under the session): nothing lost, the broker goes on.
        n0 = writer.acked_on(mine)
        epochs_before = _metadata_at(brokers[0].bootstrap)
        closed = proxy.block()
        time.sleep(0.8)
        proxy.unblock()
        writer.wait_acked(n0 + 100, mine, 30, "the cut broker's partitions after a short cut")
        short_leaders = _metadata_at(brokers[0].bootstrap)
        print(f"short cut: {closed} store sockets closed; (leader, epoch) after {short_leaders} "
              f"(before {epochs_before})")

        # A cut past the session: the partitions move, the cut broker answers nothing stale.
        keys = [f"k{k}" for k in range(30)]
        coordinated_here = sorted(k for k, n in _coordinators(brokers[0].bootstrap, 1, keys).items() if n == 3)
        assert coordinated_here, "node 3 coordinates none of 30 transactional ids"
        closed = proxy.block()
        blocked_at = time.monotonic()
        survivors = _bootstrap(brokers[:2])
        moved = _wait_leaders(survivors, TOPIC, lambda ls: len(ls) == PARTITIONS and 3 not in ls.values(),
                              "the cut broker's partitions moved", timeout=20)
        moved_s = time.monotonic() - blocked_at
        n1 = writer.acked_on(mine)
        writer.wait_acked(n1 + 100, mine, 30, "the moved partitions at their new leaders")
        time.sleep(max(0.0, blocked_at + SESSION_S + 0.5 - time.monotonic()))  # its own lease surely over
        probes = [_probe(cut.bootstrap, p) for p in sorted(mine)]
        # Nor does it name itself as a leader or a coordinator: its last view of the store is
        # stale, and a client that asks only it would go round in circles (Metadata names it,
        # Produce answers NOT_LEADER_OR_FOLLOWER, Metadata names it again).
        cut_view = _metadata_at(cut.bootstrap)
        assert all(leader != 3 for leader, _e in cut_view.values()), f"the cut broker's Metadata: {cut_view}"
        cut_coord = _coordinators(cut.bootstrap, 1, coordinated_here)
        assert 3 not in cut_coord.values(), f"the cut broker's FindCoordinator: {cut_coord}"
        assert all(pc != 0 and fc != 0 for pc, fc in probes), f"the cut broker answered: {probes}"
        assert cut.proc is not None and cut.proc.poll() is None, "the cut broker exited"
        blocked_s = time.monotonic() - blocked_at
        proxy.unblock()
        unblocked_at = time.monotonic()

        # It registers again and leads its preferred partitions again.
        after = _wait_leaders(boot, TOPIC, lambda ls: ls == before, "the cut broker leads its partitions again",
                              timeout=30)
        rejoin_s = time.monotonic() - unblocked_at
        n2 = writer.acked_on(mine)
        writer.wait_acked(n2 + 100, mine, 30, "the returned broker's partitions")
        writer.stop()
        print(f"long cut: {closed} store sockets closed, {proxy.refused} connections refused; partitions moved "
              f"{moved_s:.1f}s after the block ({moved}); blocked {blocked_s:.1f}s; probes at the cut broker "
              f"{probes}, its Metadata says {cut_view}; back as leader {rejoin_s:.1f}s after unblocking ({after})")
        assert not writer.errors, writer.errors[:5]
        log = cut.log_tail(500_000)
        assert "dropping every leadership" in log
        assert log.count("registered at") >= 2, "the cut broker did not register again"

        acked = writer.acked
        got = _read(boot, TOPIC, lambda out: len(out) >= len(acked), isolation="read_uncommitted", timeout=60,
                    settle=1.0)
        dups = [v for v, n in collections.Counter(v for _p, _o, v in got).items() if n > 1]
        assert not dups, f"{len(dups)} duplicated values, e.g. {dups[:5]}"
        assert sorted(got) == sorted(acked), (
            f"read {len(got)}, acknowledged {len(acked)}; missing {sorted(set(acked) - set(got))[:5]}, "
            f"extra {sorted(set(got) - set(acked))[:5]}")
        print(f"{len(acked)} records acknowledged, all read back once at their offsets")
    finally:
        if writer is not None:
            writer._stop.set()
        proxy.unblock()
        _stop_all(brokers)


# -- 3. a paused group coordinator resumes: no stale committed offset (the zombie of long run 11) --


def _offset_fetch_frame(group: str, topic: str, corr: int) -> bytes:
    from oncelog.protocol import framing

    m = apis.message_module_classes(apis.OFFSET_FETCH, 7, False)
    body = m["OffsetFetchRequest"](group_id=group, require_stable=True, topics=(
        m["OffsetFetchRequestTopic"](name=topic, partition_indexes=(0,)),))
    return framing.encode_request(apis.OFFSET_FETCH, 7, corr, "zombie-probe", body)


def _offset_fetch_answer(c: ProtocolClient) -> tuple[int, int, int]:
    """(top-level error, partition error, committed offset) of the OffsetFetch v7 answer on ``c``."""
    from oncelog.protocol import framing

    _corr, r = framing.decode_response(apis.OFFSET_FETCH, 7, c.recv_frame())
    if not r.topics:  # a whole-request error (NOT_COORDINATOR) carries no topics
        return int(r.error_code), -1, -1
    p = r.topics[0].partitions[0]
    return int(r.error_code), int(p.error_code), int(p.committed_offset)


def test_a_paused_group_coordinator_answers_no_stale_offset_when_it_resumes(pg_dsn: str, tmp_path: Path) -> None:
    """SIGSTOP the group coordinator past its session; the other broker takes the group and a
    newer offset is committed there; an OffsetFetch that reached the paused broker meanwhile is
    answered after SIGCONT. It must not be the old offset: the resumed broker's event loop reads
    the queued request before its heartbeat runs, so without the lease check before every request
    it answered from the group state it had when paused (long run 11: a copier rewound three
    transactions and copied them again)."""
    import os
    import signal

    from confluent_kafka import Consumer, TopicPartition

    from cluster_procs import brokers as cluster_brokers

    with cluster_brokers(pg_dsn, tmp_path, SMALL, nodes=(1, 2)) as (b1, b2):
        boot = _bootstrap([b1, b2])
        topic = "zombie-offsets"
        kc.create_topic("confluent", boot, topic, 1)
        group = _pick(boot, 0, "zombie-group", lambda n: n == 1)

        def commit(bootstrap: str, offset: int) -> None:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
            try:
                for _ in range(60):  # bounded: the coordinator may be moving or loading
                    try:
                        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
                        return
                    except Exception:  # noqa: BLE001 - NOT_COORDINATOR / LOAD_IN_PROGRESS: again
                        time.sleep(0.5)
                raise AssertionError(f"commit of {offset} never succeeded")
            finally:
                c.close()

        commit(b1.bootstrap, 5)
        probe = ProtocolClient(b1.bootstrap)
        try:
            probe.send_raw(_offset_fetch_frame(group, topic, 1))
            assert _offset_fetch_answer(probe) == (0, 0, 5)

            os.kill(b1.pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + 30
                while _coordinators(b2.bootstrap, 0, [group]).get(group) != 2:
                    assert time.monotonic() < deadline, "broker 2 never took the group"
                    time.sleep(0.2)
                commit(b2.bootstrap, 9)
                probe.send_raw(_offset_fetch_frame(group, topic, 2))  # queued at the paused broker
            finally:
                os.kill(b1.pid, signal.SIGCONT)
            top, part, offset = _offset_fetch_answer(probe)
        finally:
            probe.close()
        assert (top, part, offset) != (0, 0, 5), "the resumed broker answered the committed offset it had when paused"
        assert top != 0 or part != 0 or offset == 9, (top, part, offset)
        print(f"the resumed broker answered: error {top}/{part}, offset {offset}")
        assert _committed(boot, group, topic, [0]) == [9]


# -- 3. a partition's leader SIGKILLed while it writes another broker's markers (issue 28) -----

LEADER_VICTIM = 3


@pytest.mark.parametrize("point", ["write_txn_markers.after_begin", "write_txn_markers.after_markers"])
def test_a_partition_leader_sigkilled_while_writing_a_coordinators_markers(pg_dsn: str, tmp_path: Path,
                                                                           point: str) -> None:
    """Node 1 coordinates a transaction over 6 partitions, two led by each broker; node 3
    SIGKILLs itself while handling the one WriteTxnMarkers that carries the markers of both its
    partitions (issue 28: one request per leader): after submitting them (durable or not), or
    after they are durable with no answer sent. The coordinator retries both markers at the
    partitions' new leaders; read_committed readers get every record of the transaction once,
    and the next transaction of the same id (which waits for this one to complete) is readable
    on every partition."""
    brokers = [BrokerProcess(tmp_path / f"broker{n}", node_id=n, store=pg_dsn, overrides=SMALL,
                             env={CRASH_ENV: point} if n == LEADER_VICTIM else None) for n in (1, 2, 3)]
    victim = brokers[LEADER_VICTIM - 1]
    try:
        for b in brokers:
            b.start(timeout=60)
        boot = _bootstrap(brokers)
        kc.create_topic("confluent", boot, TOPIC, PARTITIONS)
        leaders = _wait_leaders(boot, TOPIC, _two_each, "two partitions of the topic led by each broker")
        tid = _pick(brokers[0].bootstrap, 1, "lead", lambda n: n == 1)
        values = [f"m-{part}-{k}".encode() for part in range(PARTITIONS) for k in range(PER_PARTITION)]
        p = TxnProducer("confluent", boot, tid)
        try:
            p.init()
            p.begin()
            for v in values:
                p.send(TOPIC, v, partition=int(v.split(b"-")[1]))
            p.flush()
            p.commit()  # the outcome is fixed at PrepareCommit; node 3's markers are retried
        finally:
            p.close()
        assert victim.proc is not None
        try:
            code = victim.proc.wait(timeout=30)
        except Exception:
            raise AssertionError(f"node {LEADER_VICTIM} did not crash at {point}; log: {victim.log_tail()}") from None
        assert code == -9, f"node {LEADER_VICTIM} exited with {code}"
        assert f"fault injection: SIGKILL at {point}" in victim.log_tail(200_000)
        survivors = _bootstrap(brokers[:2])
        _wait_leaders(survivors, TOPIC, lambda ls: len(ls) == PARTITIONS and LEADER_VICTIM not in ls.values(),
                      f"node {LEADER_VICTIM}'s partitions led elsewhere")
        q = TxnProducer("confluent", survivors, tid)
        try:
            q.init()  # waits (CONCURRENT_TRANSACTIONS, retried) until the first transaction is complete
            q.begin()
            for part in range(PARTITIONS):
                q.send(TOPIC, f"next-{part}".encode(), partition=part)
            q.commit()
        finally:
            q.close()
        later = {f"next-{part}".encode() for part in range(PARTITIONS)}
        got = _read(survivors, TOPIC, lambda out: later <= {v for _p, _o, v in out}, timeout=60)
        seen = collections.Counter(v for _p, _o, v in got)
        assert not later - set(seen), f"{point}: the next transaction is not readable on {sorted(later - set(seen))}"
        mine = {v: n for v, n in seen.items() if v.startswith(b"m-")}
        victim_parts = sorted(p_ for p_, node in leaders.items() if node == LEADER_VICTIM)
        assert sorted(mine) == sorted(values) and set(mine.values()) == {1}, \
            f"{point}: the transaction is partial or duplicated (node 3 led {victim_parts}): {mine}"
        assert all(seen[v] == 1 for v in later)
    finally:
        _stop_all(brokers)

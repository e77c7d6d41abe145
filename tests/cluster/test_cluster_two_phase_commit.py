"""A prepared two-phase-commit transaction (KIP-939) survives the SIGKILL of its transaction
coordinator in a cluster (issue 17, section 3): three brokers on one PostgreSQL; a 2PC producer
whose coordinator is node 2 writes to partitions led by every broker and flushes ("prepare");
node 2 is SIGKILLed; another broker becomes the coordinator of the transactional id, replays
its record (the 2PC timeout and all) and runs its timeout scan every 200 ms for longer than the
transaction.timeout.ms the producer asked for — the transaction is not aborted; a new instance,
through the new coordinator, keeps it (InitProducerId keep_prepared_txn answers the prepared
pair) and commits it; read_committed readers on the surviving brokers see nothing before and
every record after. Crafted kio requests; every wait bounded; traffic on 127.0.0.1 only.
"""

from __future__ import annotations

import time
from pathlib import Path

import kafka_clients as kc
from cluster_procs import brokers, read_from_start
from oncelog.client import ProtocolClient
from oncelog.protocol import apis
from twopc_requests import NONE, add_partitions, end_txn, init_pid, produce

OVERRIDES = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "400",
             "offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6",
             "transaction.two.phase.commit.enable": "true",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
TOPIC = "ledger"
PARTITIONS = 6
VICTIM = 2


def _coordinators(addr: str, keys: list[str]) -> dict[str, int]:
    m = apis.message_class(apis.FIND_COORDINATOR, 4, False)
    with ProtocolClient(addr) as c:
        r = c.request(apis.FIND_COORDINATOR, m(key_type=1, coordinator_keys=tuple(keys)), version=4)
    return {x.key: x.node_id for x in r.coordinators if x.error_code == 0}


def _leaders(addr: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": addr}).list_topics(TOPIC, timeout=10)
    return {p.id: p.leader for p in md.topics[TOPIC].partitions.values()}


def _until(what: str, check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def test_prepared_transaction_survives_its_coordinators_death(pg_dsn: str, tmp_path: Path) -> None:
    with brokers(pg_dsn, tmp_path, OVERRIDES) as procs:
        by_node = {n: procs[n - 1] for n in (1, 2, 3)}
        live = by_node[1].bootstrap
        everyone = ",".join(b.bootstrap for b in procs)
        kc.create_topic("confluent", everyone, TOPIC, PARTITIONS)
        leaders = _until("every broker leads a partition of the topic",
                         lambda: (lv := _leaders(everyone)) and len(set(lv.values())) == 3 and lv)
        keys = [f"db-{k}" for k in range(40)]
        tid = _until("a transactional id coordinated by node 2",
                     lambda: next((k for k, n in _coordinators(live, keys).items() if n == VICTIM), None))

        # prepare, through node 2: 2PC, a timeout of 1 s asked for (and ignored), every partition
        with ProtocolClient(by_node[VICTIM].bootstrap) as coord:
            err, pid, epoch, _, _ = init_pid(coord, tid, timeout_ms=1_000, enable_2pc=True)
            assert err == NONE
            assert add_partitions(coord, tid, pid, epoch, TOPIC, list(range(PARTITIONS))) == [NONE] * PARTITIONS
        for part, node in sorted(leaders.items()):
            with ProtocolClient(by_node[node].bootstrap) as leader:
                assert produce(leader, tid, pid, epoch, TOPIC, part, [f"row-{part}".encode()]) == NONE

        by_node[VICTIM].kill()
        survivors = ",".join(by_node[n].bootstrap for n in (1, 3))
        new = _until("the transactional id's new coordinator",
                     lambda: (n := _coordinators(live, [tid]).get(tid)) not in (None, VICTIM) and n, timeout=40)
        time.sleep(3.0)  # fifteen timeout scans of the new coordinator, three times the 1 s asked for
        assert read_from_start(survivors, TOPIC, PARTITIONS, lambda out: False, group="before",
                               isolation="read_committed", timeout=4, settle=0) == []

        with ProtocolClient(by_node[new].bootstrap) as c:
            answer = _until("InitProducerId(keep_prepared_txn) at the new coordinator",
                            lambda: (a := init_pid(c, tid, enable_2pc=True, keep=True))[0] == NONE and a)
            assert answer[3:] == (pid, epoch)  # the prepared transaction was kept, not aborted
            assert answer[1:3] == (pid, epoch + 1)
            assert _until("EndTxn(commit)", lambda: end_txn(c, tid, pid, epoch + 1, commit=True) == NONE, timeout=40)

        want = sorted(f"row-{p}".encode() for p in range(PARTITIONS))
        got = read_from_start(survivors, TOPIC, PARTITIONS, lambda out: len(out) >= PARTITIONS, group="after",
                              isolation="read_committed", timeout=60)
        assert sorted(v for _p, _o, v in got) == want

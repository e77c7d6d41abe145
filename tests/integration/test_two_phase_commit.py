"""Two-phase commit (KIP-939) end to end against a real broker process, with crafted kio
requests (issue 17, section 3).

The recovery contract an external coordinator (a database, Spark's driver) follows, step by step:
a 2PC producer writes a transaction and flushes it (KIP-939's "prepare": every Produce
acknowledged); the producer dies (its connection just drops) and the broker is SIGKILLed and
restarted; a new instance of the producer sends InitProducerId(enable_2pc, keep_prepared_txn)
and is told the kept transaction's producer id and epoch, which match what the external
coordinator recorded when it prepared; it completes the transaction as decided (EndTxn) — once
commit, once abort. A read_committed reader (confluent-kafka) sees nothing of it before the
completion, and exactly the decided outcome after. Also: a 2PC transaction outlives
transaction.timeout.ms while an ordinary one is aborted, and 2PC is refused while the broker
switch ``transaction.two.phase.commit.enable`` is off.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import kafka_clients as kc
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from twopc_requests import (INVALID_REQUEST, INVALID_TXN_STATE, NONE, PRODUCER_FENCED, TXN_ID_AUTHZ_FAILED,
                            add_partitions, end_txn, init_pid, produce)

pytestmark = pytest.mark.integration

ON = {"transaction.two.phase.commit.enable": "true"}


def committed(broker: BrokerProcess, topic: str, partitions: list[int], expected: int) -> list[tuple[int, bytes]]:
    """What a read_committed confluent-kafka consumer reads: (partition, value), by partition."""
    got = kc.consume("confluent", broker.bootstrap, topic, partitions, expected=expected, isolation="read_committed",
                     timeout=5 if expected == 0 else 30, settle=1.0)
    return sorted((p, v) for p, _o, _k, v in got)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_prepare_crash_recover_complete(broker_factory, commit: bool) -> None:
    broker = broker_factory(overrides=ON)
    topic = "ledger"
    kc.create_topic("confluent", broker.bootstrap, topic, 2)
    tid = "db-txn-42"

    # 1. prepare: the transaction is written and every Produce acknowledged (flushed)
    a = ProtocolClient(broker.bootstrap)
    err, pid, epoch, _, _ = init_pid(a, tid, enable_2pc=True)
    assert err == NONE
    assert add_partitions(a, tid, pid, epoch, topic, [0, 1]) == [NONE, NONE]
    assert produce(a, tid, pid, epoch, topic, 0, [b"debit alice 10"]) == NONE
    assert produce(a, tid, pid, epoch, topic, 1, [b"credit bob 10"]) == NONE
    prepared_token = (pid, epoch)  # what the external coordinator records with its own prepare
    kc.produce("confluent", broker.bootstrap, topic, [(0, None, b"later, not transactional")])
    assert committed(broker, topic, [0, 1], expected=0) == []  # held at the LSO by the prepared transaction

    # 2. crash: the producer's connection drops, the broker is SIGKILLed and restarted
    a.close()
    broker.kill()
    broker.start()
    assert committed(broker, topic, [0, 1], expected=0) == []

    # 3. a new instance keeps the prepared transaction and learns its identity
    b = ProtocolClient(broker.bootstrap)
    err, pid2, epoch2, ongoing_pid, ongoing_epoch = init_pid(b, tid, enable_2pc=True, keep=True)
    assert err == NONE
    assert (ongoing_pid, ongoing_epoch) == prepared_token  # it is the transaction the coordinator prepared
    assert (pid2, epoch2) == (pid, epoch + 1)  # the crashed instance is fenced
    assert committed(broker, topic, [0, 1], expected=0) == []  # still undecided: nothing visible
    # the kept transaction is final: nothing can be added to it, and the old instance is fenced
    assert produce(b, tid, pid2, epoch2, topic, 0, [b"sneaked in"]) == INVALID_TXN_STATE
    assert end_txn(b, tid, pid, epoch, commit=True) == PRODUCER_FENCED

    # 4. complete as decided
    assert end_txn(b, tid, pid2, epoch2, commit=commit) == NONE
    if commit:
        want = [(0, b"debit alice 10"), (0, b"later, not transactional"), (1, b"credit bob 10")]
    else:
        want = [(0, b"later, not transactional")]
    assert committed(broker, topic, [0, 1], expected=len(want)) == want
    # the decision is repeated (the external coordinator retries until it hears success): still success
    assert end_txn(b, tid, pid2, epoch2, commit=commit) == NONE
    assert end_txn(b, tid, pid2, epoch2, commit=not commit) == INVALID_TXN_STATE
    b.close()

    broker.kill()  # and the outcome survives another crash of the broker
    broker.start()
    assert committed(broker, topic, [0, 1], expected=len(want)) == want


def test_2pc_transaction_outlives_the_timeout_and_an_ordinary_one_does_not(broker_factory) -> None:
    broker = broker_factory(overrides={**ON, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    kc.create_topic("confluent", broker.bootstrap, "twopc", 1)
    kc.create_topic("confluent", broker.bootstrap, "plain", 1)
    with ProtocolClient(broker.bootstrap) as c:
        _, pid, epoch, _, _ = init_pid(c, "twopc-id", timeout_ms=1_000, enable_2pc=True)
        assert add_partitions(c, "twopc-id", pid, epoch, "twopc", [0]) == [NONE]
        assert produce(c, "twopc-id", pid, epoch, "twopc", 0, [b"kept"]) == NONE
        _, ppid, pepoch, _, _ = init_pid(c, "plain-id", timeout_ms=1_000)
        assert add_partitions(c, "plain-id", ppid, pepoch, "plain", [0]) == [NONE]
        assert produce(c, "plain-id", ppid, pepoch, "plain", 0, [b"timed out"]) == NONE
        deadline = time.monotonic() + 20
        while "aborted 1 timed-out transaction(s): plain-id" not in broker.log_tail(50_000):
            assert time.monotonic() < deadline, broker.log_tail()
            time.sleep(0.2)
        time.sleep(2.0)  # ten more scans, each past the 2PC transaction's requested 1 s as well
        assert "twopc-id" not in broker.log_tail(50_000).split("timed-out transaction(s):")[-1]
        described = subprocess.run([sys.executable, "-m", "oncelog", "transactions", "describe", "twopc-id",
                                    "-b", broker.bootstrap, "--json"], capture_output=True, text=True, timeout=60)
        assert described.returncode == 0, described.stderr
        d = json.loads(described.stdout)
        assert (d["state"], d["timeout_ms"], d["two_phase_commit"]) == ("Ongoing", 2_147_483_647, True)
        assert end_txn(c, "plain-id", ppid, pepoch, commit=True) == PRODUCER_FENCED  # aborted under it
        assert end_txn(c, "twopc-id", pid, epoch, commit=True) == NONE  # still open: it commits
    assert committed(broker, "twopc", [0], expected=1) == [(0, b"kept")]
    assert committed(broker, "plain", [0], expected=0) == []


def test_refusals(broker_factory) -> None:
    off = broker_factory("off")  # transaction.two.phase.commit.enable defaults to false, as in Kafka
    with ProtocolClient(off.bootstrap) as c:
        assert c.versions[apis.INIT_PRODUCER_ID] == (0, 5)  # Kafka 4.2's advertised range; v6 is served all the same
        assert init_pid(c, "t", enable_2pc=True)[0] == TXN_ID_AUTHZ_FAILED
        assert init_pid(c, "t", enable_2pc=True, keep=True)[0] == TXN_ID_AUTHZ_FAILED
        assert init_pid(c, "t", keep=True)[0] == TXN_ID_AUTHZ_FAILED
        err, _pid, epoch, ongoing_pid, ongoing_epoch = init_pid(c, "t")  # v6 without 2PC: as ever
        assert (err, epoch, ongoing_pid, ongoing_epoch) == (NONE, 0, -1, -1)
        assert init_pid(c, "t", version=4)[:3] == (NONE, _pid, 1)
        answers = [init_pid(c, "every-version", version=v)[:3] for v in range(7)]  # every advertised version
        assert [(e, epoch) for e, _p, epoch in answers] == [(NONE, v) for v in range(7)]
        assert len({p for _e, p, _epoch in answers}) == 1
    on = broker_factory("on", overrides=ON)
    with ProtocolClient(on.bootstrap) as c:
        assert init_pid(c, "t", keep=True)[0] == INVALID_REQUEST  # keep_prepared_txn needs enable_2pc
        assert init_pid(c, None, enable_2pc=True)[0] == INVALID_REQUEST  # 2PC needs a transactional id
        kc.create_topic("confluent", on.bootstrap, "p", 1)
        _, pid, epoch, _, _ = init_pid(c, "plain")
        assert add_partitions(c, "plain", pid, epoch, "p", [0]) == [NONE]
        assert produce(c, "plain", pid, epoch, "p", 0, [b"x"]) == NONE
        # an ordinary transaction cannot be kept: nobody promised to keep it, the timeout may take it
        assert init_pid(c, "plain", enable_2pc=True, keep=True)[0] == INVALID_TXN_STATE
        assert end_txn(c, "plain", pid, epoch, commit=True) == NONE  # and it was left as it was

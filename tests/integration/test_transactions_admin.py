"""ListTransactions (66), DescribeTransactions (65), DescribeProducers (61) and the admin's
abort (WriteTxnMarkers) on the embedded broker (issue 17): through kafka-python's admin client
(an independent implementation of KIP-664's client side), through crafted kio requests for each
advertised version and the error cases, and through ``oncelog transactions`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import kafka_clients as kc
from oncelog.client import ProtocolClient
from oncelog.process import BrokerProcess
from oncelog.protocol import apis
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import make

pytestmark = pytest.mark.integration
TOPIC = "adm"


@pytest.fixture
def txns(broker: BrokerProcess):
    """An open transaction "open-1" on adm-0 and adm-1, a committed one "done-1" on adm-0."""
    from confluent_kafka import Producer

    kc.create_topic("confluent", broker.bootstrap, TOPIC, 2)
    done = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "done-1", "linger.ms": 0})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(TOPIC, b"c", partition=0)
    done.commit_transaction(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open-1", "linger.ms": 0,
                  "transaction.timeout.ms": 600_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"o0", partition=0)
    p.produce(TOPIC, b"o1", partition=1)
    assert p.flush(30) == 0
    yield broker
    from confluent_kafka import KafkaException

    try:
        p.abort_transaction(30)
    except KafkaException as exc:  # fenced by the forced abort of test_cli_abort_by_producer_id_and_refusals
        assert exc.args[0].fatal(), exc


def test_kafka_python_admin_lists_describes_and_aborts(txns: BrokerProcess) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin._transactions import AbortTransactionSpec

    a = KafkaAdminClient(bootstrap_servers=txns.bootstrap, request_timeout_ms=10_000)
    try:
        by_node = a.list_transactions()
        listed = {t.transactional_id: t.state.value for ts in by_node.values() for t in ts}
        assert listed == {"open-1": "Ongoing", "done-1": "CompleteCommit"}
        ongoing = a.list_transactions(state_filters=["Ongoing"])
        assert [t.transactional_id for ts in ongoing.values() for t in ts] == ["open-1"]
        assert [t.transactional_id for ts in a.list_transactions(duration_filter_ms=3_600_000).values()
                for t in ts] == []
        assert [t.transactional_id for ts in a.list_transactions(transactional_id_pattern="done-.*").values()
                for t in ts] == ["done-1"]

        d = a.describe_transactions(["open-1"])["open-1"]
        assert d.state.value == "Ongoing"
        assert d.topic_partitions == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}
        assert d.transaction_timeout_ms == 600_000
        assert 0 < time.time() * 1000 - d.transaction_start_time_ms < 600_000

        states = a.describe_producers([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        (open1,) = states[TopicPartition(TOPIC, 1)].active_producers
        assert open1.producer_id == d.producer_id and open1.producer_epoch == d.producer_epoch
        assert open1.current_transaction_start_offset == 0 and open1.last_sequence == 0
        p0 = {s.producer_id: s for s in states[TopicPartition(TOPIC, 0)].active_producers}
        assert p0[d.producer_id].current_transaction_start_offset == 2  # after "c" and its COMMIT marker
        assert len(p0) == 2 and all(s.current_transaction_start_offset == -1
                                    for pid, s in p0.items() if pid != d.producer_id)

        a.abort_transaction(AbortTransactionSpec(TopicPartition(TOPIC, 1), d.producer_id, d.producer_epoch, -1))
        (after,) = a.describe_producers([TopicPartition(TOPIC, 1)])[TopicPartition(TOPIC, 1)].active_producers
        assert after.current_transaction_start_offset == -1
    finally:
        a.close()


def _list(c: ProtocolClient, version: int, **kw: object):
    m = c.classes(apis.LIST_TRANSACTIONS, version)
    return c.request(apis.LIST_TRANSACTIONS, make(m["ListTransactionsRequest"], **kw), version=version)


def test_crafted_requests_every_version_and_errors(txns: BrokerProcess) -> None:
    with ProtocolClient(txns.bootstrap) as c:
        adv = c.versions
        assert adv[apis.LIST_TRANSACTIONS] == (0, 2)
        assert adv[apis.DESCRIBE_TRANSACTIONS] == (0, 0) and adv[apis.DESCRIBE_PRODUCERS] == (0, 0)
        for v in (0, 1, 2):
            r = _list(c, v, state_filters=("Ongoing", "Bogus"), producer_id_filters=())
            assert r.error_code == ErrorCode.none
            assert tuple(r.unknown_state_filters) == ("Bogus",)
            assert [t.transactional_id for t in r.transaction_states] == ["open-1"]
            everything = _list(c, v)
            pids = {t.transactional_id: t.producer_id for t in everything.transaction_states}
            assert set(pids) == {"open-1", "done-1"}
            only = _list(c, v, producer_id_filters=(pids["done-1"],))
            assert [(t.transactional_id, t.transaction_state) for t in only.transaction_states] == [
                ("done-1", "CompleteCommit")]
            assert _list(c, v, state_filters=("Bogus",)).transaction_states == ()
        assert _list(c, 1, duration_filter=0).transaction_states  # every started one ran > 0 ms
        assert _list(c, 1, duration_filter=3_600_000).transaction_states == ()
        assert [t.transactional_id for t in _list(c, 2, transactional_id_pattern="open-.").transaction_states] == ["open-1"]
        assert _list(c, 2, transactional_id_pattern="open").transaction_states == ()  # the whole id must match
        assert _list(c, 2, transactional_id_pattern="(").error_code == ErrorCode.invalid_regular_expression

        m = c.classes(apis.DESCRIBE_TRANSACTIONS, 0)
        r = c.request(apis.DESCRIBE_TRANSACTIONS, m["DescribeTransactionsRequest"](
            transactional_ids=("open-1", "nobody", "done-1")), version=0)
        by_id = {t.transactional_id: t for t in r.transaction_states}
        assert by_id["nobody"].error_code == ErrorCode.transactional_id_not_found
        assert by_id["open-1"].error_code == ErrorCode.none and by_id["open-1"].transaction_state == "Ongoing"
        assert {(d.topic, tuple(d.partitions)) for d in by_id["open-1"].topics} == {(TOPIC, (0, 1))}
        assert by_id["done-1"].transaction_state == "CompleteCommit" and by_id["done-1"].topics == ()

        m = c.classes(apis.DESCRIBE_PRODUCERS, 0)
        r = c.request(apis.DESCRIBE_PRODUCERS, m["DescribeProducersRequest"](topics=(
            m["TopicRequest"](name=TOPIC, partition_indexes=(1, 7)),
            m["TopicRequest"](name="no-such-topic", partition_indexes=(0,)))), version=0)
        codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
        assert codes == {(TOPIC, 1): ErrorCode.none, (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
                         ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}


def test_cli_tables(txns: BrokerProcess) -> None:
    def run(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", *args, "-b", txns.bootstrap],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    listed = run("list")
    assert "open-1" in listed and "Ongoing" in listed and "done-1" in listed
    described = run("describe", "--transactional-id", "open-1")
    assert "Ongoing" in described and "adm-0,adm-1" in described
    assert "no hanging transactions" in run("find-hanging")
    out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", "describe", "nobody", "-b", txns.bootstrap,
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in out.stdout


def test_cli_abort_by_producer_id_and_refusals(txns: BrokerProcess) -> None:
    def run(*args: str, code: int = 0) -> dict:
        out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", *args, "-b", txns.bootstrap, "--json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == code, out.stdout + out.stderr
        return json.loads(out.stdout)

    (p1,) = run("producers", "--topic", TOPIC, "--partition", "1")["producers"]
    assert p1["current_txn_start_offset"] == 0
    refused = run("abort", "--topic", TOPIC, "--partition", "1", "--start-offset", "5", code=1)
    assert "no open transaction starts at offset 5" in refused["error"]
    live = run("abort", "--topic", TOPIC, "--partition", "1", "--producer-id", str(p1["producer_id"]),
               "--producer-epoch", str(p1["producer_epoch"]), "--coordinator-epoch", "0", code=1)
    assert "not hanging" in live["error"] and "--force" in live["error"]  # open-1 is live (issue 26 row 6)
    done = run("abort", "--topic", TOPIC, "--partition", "1", "--producer-id", str(p1["producer_id"]),
               "--producer-epoch", str(p1["producer_epoch"]), "--coordinator-epoch", "0", "--force")
    assert done["aborted"]  # forced: aborted whole through its coordinator, its producer fenced
    (after0,) = [x for x in run("producers", f"{TOPIC}-0")["producers"] if x["producer_id"] == p1["producer_id"]]
    assert after0["current_txn_start_offset"] == -1  # on every partition of the transaction, not only adm-1
    assert run("describe", "--transactional-id", "open-1")["producer_epoch"] > p1["producer_epoch"]
    (after,) = run("producers", f"{TOPIC}-1")["producers"]
    assert after["current_txn_start_offset"] == -1

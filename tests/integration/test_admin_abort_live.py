"""An admin abort never tears a live transaction (issue 26 row 6).

A real confluent-kafka transactional producer has written the first record of a transaction
and is still going. Neither the web console's abort (over real HTTP) nor ``oncelog transactions
abort`` (by start offset or by producer id) may abort it: both refuse, saying it is not hanging,
and the producer's commit then gives read_committed readers the WHOLE transaction. Before the
fix the console aborted it, the producer's later record and commit went through, and readers saw
the transaction without its first record. A transaction that really hangs (its coordinator's
record destroyed, as tests/integration/test_hanging_transaction.py makes one) is still aborted
through the console. ``--force`` is the CLI's explicit way past the check (docs/TRANSACTIONS.md).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer

import kafka_clients as kc
from hanging_txn import make_hanging_transaction
from oncelog.process import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
TOPIC = "live"


def post_abort(address: str, topic: str, partition: int, start_offset: int) -> tuple[int, dict]:
    host, port = address.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        c.request("POST", "/api/transactions/abort",
                  body=json.dumps({"topic": topic, "partition": partition, "start_offset": start_offset}),
                  headers={"Content-Type": "application/json", "X-Oncelog-Console": "abort"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        c.close()


def cli(bootstrap: str, *args: str, code: int = 0) -> dict:
    out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", *args, "-b", bootstrap, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == code, f"{args}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout)


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    seen = kc.consume("confluent", bootstrap, topic, [0], expected=expected, isolation="read_committed",
                      timeout=30, settle=0.5)
    return [v for _p, _o, _k, v in seen]


def test_a_live_transaction_is_aborted_neither_by_the_console_nor_the_cli(broker_factory) -> None:
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"console.listen": address})
    kc.create_topic("confluent", b.bootstrap, TOPIC, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "healthy", "linger.ms": 0,
                  "transaction.timeout.ms": 120_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"first", partition=0)
    assert p.flush(30) == 0  # written, the transaction open and live (its coordinator has it Ongoing)

    status, doc = post_abort(address, TOPIC, 0, 0)
    assert status == 409, doc
    assert "not hanging" in doc["error"]

    refused = cli(b.bootstrap, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0", code=1)
    assert "not hanging" in refused["error"] and "--force" in refused["error"]
    (mine,) = cli(b.bootstrap, "producers", "--topic", TOPIC, "--partition", "0")["producers"]
    assert mine["current_txn_start_offset"] == 0  # still open
    refused = cli(b.bootstrap, "abort", "--topic", TOPIC, "--partition", "0", "--producer-id",
                  str(mine["producer_id"]), "--producer-epoch", str(mine["producer_epoch"]),
                  "--coordinator-epoch", "0", code=1)
    assert "not hanging" in refused["error"]

    p.produce(TOPIC, b"second", partition=0)
    p.commit_transaction(30)
    assert committed_values(b.bootstrap, TOPIC, 2) == [b"first", b"second"]  # the whole transaction


def test_a_hanging_transaction_is_still_aborted_through_the_console(broker_factory) -> None:
    address = f"127.0.0.1:{free_port()}"
    b = broker_factory(overrides={"console.listen": address})
    p = make_hanging_transaction(b)

    status, doc = post_abort(address, "hung", 0, 1)
    assert status == 200 and doc["aborted"], doc
    assert committed_values(b.bootstrap, "hung", 2) == [b"before", b"after"]
    del p


def test_a_forced_abort_of_a_live_transaction_aborts_it_whole_and_fences_its_producer(broker_factory) -> None:
    """``--force`` on a live transaction: aborted on every partition through its coordinator and
    its producer fenced, so the producer's later record and commit fail and read_committed
    readers see none of the transaction, never part of it."""
    from confluent_kafka import KafkaException

    b = broker_factory()
    kc.create_topic("confluent", b.bootstrap, "forced", 2)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "forced-1", "linger.ms": 0,
                  "transaction.timeout.ms": 120_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("forced", b"first-0", partition=0)
    p.produce("forced", b"first-1", partition=1)
    assert p.flush(30) == 0

    done = cli(b.bootstrap, "abort", "--topic", "forced", "--partition", "0", "--start-offset", "0", "--force")
    assert done["aborted"]
    producers = cli(b.bootstrap, "producers", "--topic", "forced")["producers"]
    assert [x["current_txn_start_offset"] for x in producers] == [-1, -1]  # both partitions, not only the one named

    p.produce("forced", b"second-0", partition=0)
    with pytest.raises(KafkaException):
        p.commit_transaction(30)  # fenced: its epoch was bumped
    kc.produce("confluent", b.bootstrap, "forced", [(0, None, b"after")])
    assert committed_values(b.bootstrap, "forced", 1) == [b"after"]  # nothing of the transaction, no part of it

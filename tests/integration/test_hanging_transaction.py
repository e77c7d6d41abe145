"""A real hanging transaction, found and aborted with the CLI (issue 17, section 1).

A confluent-kafka transactional producer writes and flushes but never commits; the broker is
SIGKILLed and its ``__transaction_state`` partitions are deleted: the coordinator's record of
the transaction is lost, so no timeout will ever abort it and no marker will ever end it. A
read_committed consumer is held at the LSO, before a later non-transactional record. Then
``python -m oncelog transactions find-hanging --json`` finds it and says why (no coordinator
knows the producer), ``python -m oncelog transactions abort`` with the arguments it printed
writes the ABORT marker, and the consumer reads on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import kafka_clients as kc
from hanging_txn import make_hanging_transaction
from oncelog.process import BrokerProcess

pytestmark = pytest.mark.integration
TOPIC = "hung"


def cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "oncelog", "transactions", *args], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert out.returncode == 0, f"oncelog transactions {' '.join(args)}: {out.returncode}\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout)


def test_hanging_transaction_found_and_aborted_with_the_cli(broker: BrokerProcess) -> None:
    p = make_hanging_transaction(broker, TOPIC)

    seen = kc.consume("confluent", broker.bootstrap, TOPIC, [0], expected=2, isolation="read_committed",
                      timeout=5, settle=0)
    assert [v for _p, _o, _k, v in seen] == [b"before"]  # held at the LSO: "after" is beyond it

    b = ["--bootstrap-server", broker.bootstrap, "--json"]
    assert cli("list", *b)["transactions"] == []  # the coordinator lost it
    producers = cli("producers", TOPIC, *b)["producers"]
    (open_txn,) = [x for x in producers if x["current_txn_start_offset"] >= 0]
    assert open_txn["current_txn_start_offset"] == 1

    (hanging,) = cli("find-hanging", *b)["hanging"]
    assert hanging["producer_id"] == open_txn["producer_id"]
    assert hanging["transactional_id"] is None
    assert "no transaction coordinator knows producer" in hanging["reason"]
    assert hanging["abort_args"] == ["--topic", TOPIC, "--partition", "0", "--start-offset", "1"]

    done = cli("abort", *hanging["abort_args"], *b)
    assert done["aborted"] and done["producer_id"] == open_txn["producer_id"]
    assert cli("find-hanging", *b)["hanging"] == []

    seen = kc.consume("confluent", broker.bootstrap, TOPIC, [0], expected=2, isolation="read_committed",
                      timeout=30, settle=0.5)
    assert [v for _p, _o, _k, v in seen] == [b"before", b"after"]
    del p

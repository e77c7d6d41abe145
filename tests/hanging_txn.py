"""A real hanging transaction on a real broker, as issue 17 made the first one: a
confluent-kafka transactional producer writes and flushes but never commits, then the broker is
SIGKILLed and its ``__transaction_state`` partitions are deleted, so no coordinator knows the
producer: no timeout will ever abort the transaction and no marker will ever end it. Used by
tests/integration/test_hanging_transaction.py, test_admin_abort_live.py and
test_console_browser.py."""

from __future__ import annotations

import shutil
from typing import Any

import kafka_clients as kc


def make_hanging_transaction(broker: Any, topic: str = "hung") -> Any:
    """``topic``-0 (created here, one partition): "before" (offset 0), the open transaction's
    record "hanging" (1) whose coordinator record is destroyed, "after" (2). ``broker`` is a
    ``BrokerProcess`` (killed and started again). Returns the confluent-kafka producer, which
    the caller may keep alive for the rest of its test."""
    from confluent_kafka import Producer

    kc.create_topic("confluent", broker.bootstrap, topic, 1)
    kc.produce("confluent", broker.bootstrap, topic, [(0, None, b"before")])
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "lost-txn", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"hanging", partition=0)
    assert p.flush(30) == 0  # written, never committed
    broker.kill()
    removed = [d for d in broker.data_dir.iterdir() if d.name.startswith("__transaction_state-")]
    assert removed
    for d in removed:
        shutil.rmtree(d)
    broker.start()
    kc.produce("confluent", broker.bootstrap, topic, [(0, None, b"after")])
    return p

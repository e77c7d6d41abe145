"""Transactions through unmodified clients (R8-R20): atomic multi-topic writes, aborts, fencing,
the LSO, timeouts of hanging transactions, and broker crashes at each step of EndTxn."""

from __future__ import annotations

import datetime
import random
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kafka_clients import CLIENTS, consume, create_topic, produce
from oncelog.client import ProtocolClient
from oncelog.protocol.messages import make
from oncelog.protocol import apis
from txn_clients import TxnProducer

pytestmark = pytest.mark.integration

READERS = {c: CLIENTS[(i + 1) % len(CLIENTS)] for i, c in enumerate(CLIENTS)}


def _values(records: list) -> list[bytes]:
    return sorted(v for *_, v in records)


def _fenced(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in ("fenced", "epoch", "invalidproducerepoch", "_fatal"))


def _list_offset(bootstrap: str, topic: str, partition: int, read_committed: bool) -> int:
    with ProtocolClient(bootstrap) as c:
        m = c.classes(apis.LIST_OFFSETS)
        req = make(
            m["ListOffsetsRequest"], replica_id=-1, isolation_level=1 if read_committed else 0,
            topics=(m["ListOffsetsTopic"](name=topic, partitions=(
                m["ListOffsetsPartition"](partition_index=partition, current_leader_epoch=-1, timestamp=-1),)),),
            timeout=datetime.timedelta(seconds=30),
        )
        return c.request(apis.LIST_OFFSETS, req).topics[0].partitions[0].offset


@pytest.mark.parametrize("client", CLIENTS)
def test_orders_and_inventory_commit_together_or_not_at_all(broker, client: str) -> None:
    """The seed's example (R16): each order and its reservation in one transaction across two
    topics; a random third of transactions aborted; read_committed readers of both topics see
    exactly the committed ones, read_uncommitted readers see everything."""
    create_topic(client, broker.bootstrap, "orders", 3)
    create_topic(client, broker.bootstrap, "inventory", 3)
    rng = random.Random(7)
    producer = TxnProducer(client, broker.bootstrap, f"shop-{client}")
    producer.init()
    committed: list[int] = []
    everything: list[int] = []
    for txn in range(30):
        producer.begin()
        orders = [txn * 10 + i for i in range(rng.randint(1, 5))]
        for o in orders:
            producer.send("orders", f"order-{o}".encode(), key=f"o{o}".encode())
            producer.send("inventory", f"reserve-{o}".encode(), key=f"o{o}".encode())
        everything += orders
        if rng.random() < 1 / 3:
            producer.flush()  # make sure the aborted records really reach the log
            producer.abort()
        else:
            producer.commit()
            committed += orders
    producer.close()
    reader = READERS[client]
    want_orders = sorted(f"order-{o}".encode() for o in committed)
    want_inventory = sorted(f"reserve-{o}".encode() for o in committed)
    got_orders = consume(reader, broker.bootstrap, "orders", [0, 1, 2], expected=len(committed),
                         isolation="read_committed", timeout=60, settle=1.0)
    got_inventory = consume(reader, broker.bootstrap, "inventory", [0, 1, 2], expected=len(committed),
                            isolation="read_committed", timeout=60, settle=1.0)
    assert _values(got_orders) == want_orders
    assert _values(got_inventory) == want_inventory
    uncommitted = consume(reader, broker.bootstrap, "orders", [0, 1, 2], expected=len(everything),
                          isolation="read_uncommitted", timeout=60, settle=0.5)
    assert _values(uncommitted) == sorted(f"order-{o}".encode() for o in everything)
    assert len(everything) > len(committed) > 0


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@pytest.mark.parametrize("restart", [False, True], ids=["live", "after-broker-restart"])
def test_second_producer_fences_the_first(broker, client: str, restart: bool) -> None:
    """R9: a new instance with the same transactional.id fences the old one; the old one's next
    send or commit fails with a fenced error and its open transaction is aborted."""
    create_topic("confluent", broker.bootstrap, "fence", 1)
    old = TxnProducer(client, broker.bootstrap, f"fence-{client}-{restart}")
    old.init()
    old.begin()
    old.send("fence", b"from-zombie", partition=0)
    old.flush()
    if restart:
        broker.kill()
        broker.start()
    new = TxnProducer(client, broker.bootstrap, f"fence-{client}-{restart}")
    new.init()
    new.begin()
    new.send("fence", b"from-new", partition=0)
    new.commit()
    with pytest.raises(Exception) as err:
        old.send("fence", b"zombie-again", partition=0)
        old.commit()
    assert _fenced(err.value), repr(err.value)
    old.close()
    new.close()
    got = consume("aiokafka", broker.bootstrap, "fence", [0], expected=1, isolation="read_committed", timeout=30, settle=1.0)
    assert _values(got) == [b"from-new"]


def test_open_transaction_holds_the_lso_until_commit(broker) -> None:
    create_topic("confluent", broker.bootstrap, "lso", 1)
    produce("confluent", broker.bootstrap, "lso", [(0, None, b"before")])
    p = TxnProducer("confluent", broker.bootstrap, "lso-holder")
    p.init()
    p.begin()
    p.send("lso", b"inside", partition=0)
    p.flush()
    produce("confluent", broker.bootstrap, "lso", [(0, None, b"after")])  # not transactional
    assert _list_offset(broker.bootstrap, "lso", 0, read_committed=False) == 3
    assert _list_offset(broker.bootstrap, "lso", 0, read_committed=True) == 1  # the LSO: first open offset
    for reader in ("confluent", "kafka-python"):
        held = consume(reader, broker.bootstrap, "lso", [0], expected=3, isolation="read_committed", timeout=3)
        assert _values(held) == [b"before"]
    p.commit()
    p.close()
    assert _list_offset(broker.bootstrap, "lso", 0, read_committed=True) == 4  # past the marker
    for reader in ("confluent", "kafka-python"):
        got = consume(reader, broker.bootstrap, "lso", [0], expected=3, isolation="read_committed", timeout=30)
        assert _values(got) == [b"after", b"before", b"inside"]


HANGING_PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "hangs", "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("hang", value=b"never-committed", partition=0)
    assert p.flush(30) == 0
    print("open", flush=True)
    time.sleep(600)
    """
)


def test_hanging_transaction_is_aborted_by_the_timeout_scan(broker_factory) -> None:
    """R20: a producer dies (SIGKILL) inside a transaction; the coordinator aborts it after
    transaction.timeout.ms, and read_committed consumers move on."""
    broker = broker_factory(overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"})
    create_topic("confluent", broker.bootstrap, "hang", 1)
    proc = subprocess.Popen([sys.executable, "-c", HANGING_PRODUCER, broker.bootstrap], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"open"
    finally:
        proc.kill()
        proc.wait(10)
    produce("confluent", broker.bootstrap, "hang", [(0, None, b"later")])
    assert _list_offset(broker.bootstrap, "hang", 0, read_committed=True) == 0
    deadline = time.monotonic() + 20
    while _list_offset(broker.bootstrap, "hang", 0, read_committed=True) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _list_offset(broker.bootstrap, "hang", 0, read_committed=True) == 3  # data, later, marker
    got = consume("kafka-python", broker.bootstrap, "hang", [0], expected=1, isolation="read_committed", timeout=30, settle=1)
    assert _values(got) == [b"later"]
    assert "aborted 1 timed-out transaction(s): hangs" in broker.log_tail(20_000)


@pytest.mark.parametrize(
    ("crash_point", "commit"),
    [
        ("end_txn.before_prepare", True),
        ("end_txn.after_prepare", True),
        ("end_txn.after_markers", True),
        ("end_txn.after_complete", True),
        ("end_txn.after_prepare", False),
        ("end_txn.after_markers", False),
    ],
)
def test_broker_killed_at_each_step_of_end_txn(broker_factory, crash_point: str, commit: bool) -> None:
    """R19: the broker dies (SIGKILL) at each point of EndTxn; restarted, it finishes the
    transaction and the producer's retried EndTxn succeeds; every marker is in (LSO = high
    watermark) and the transaction's consumer offsets materialise (commit) or vanish (abort)."""
    from confluent_kafka import Consumer, TopicPartition

    broker = broker_factory(env={"ONCELOG_CRASH_POINT": crash_point})
    create_topic("confluent", broker.bootstrap, "orders", 2)
    create_topic("confluent", broker.bootstrap, "inventory", 2)
    create_topic("confluent", broker.bootstrap, "source", 1)
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crash-group"})
    p = TxnProducer("confluent", broker.bootstrap, "crashy", extra={"message.timeout.ms": 60_000})
    p.init()
    p.begin()
    for i in range(20):
        p.send("orders", f"order-{i}".encode(), partition=i % 2)
        p.send("inventory", f"reserve-{i}".encode(), partition=i % 2)
    p.send_offsets({("source", 0): 17}, "crash-group", consumer=group)
    p.flush()
    outcome: list[object] = []
    t = threading.Thread(target=lambda: outcome.append(_try(p.commit if commit else p.abort)))
    t.start()
    assert broker.proc is not None
    broker.proc.wait(30)  # the broker kills itself at the crash point
    assert broker.proc.returncode == -9
    broker.env = None
    broker.start()
    t.join(90)
    assert outcome == [None], f"EndTxn failed: {outcome}"
    p.close()
    for topic in ("orders", "inventory"):
        for part in (0, 1):
            assert _list_offset(broker.bootstrap, topic, part, True) == _list_offset(broker.bootstrap, topic, part, False)
    want = 20 if commit else 0
    got = consume("aiokafka", broker.bootstrap, "orders", [0, 1], expected=want, isolation="read_committed", timeout=10, settle=1)
    assert _values(got) == sorted(f"order-{i}".encode() for i in range(want))
    got = consume("confluent", broker.bootstrap, "inventory", [0, 1], expected=want, isolation="read_committed", timeout=10, settle=1)
    assert _values(got) == sorted(f"reserve-{i}".encode() for i in range(want))
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crash-group", "isolation.level": "read_committed"})
    [committed] = checker.committed([TopicPartition("source", 0)], timeout=30)
    checker.close()
    group.close()
    assert committed.offset == (17 if commit else -1001)  # -1001: no committed offset


def _try(fn) -> object:  # type: ignore[no-untyped-def]
    try:
        fn()
        return None
    except Exception as exc:  # noqa: BLE001 - reported by the assertion
        return exc

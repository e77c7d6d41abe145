"""Scenario 3 of ``oncelog verify``: torn writes and damaged files between runs.

Each round writes through real clients (a transactional confluent-kafka producer committing and
aborting, and an idempotent one), records what was acknowledged, kills the broker with SIGKILL,
damages its files, restarts it, and checks that nothing acknowledged is lost, nothing is
duplicated, aborted data stays invisible to read_committed readers, and the broker started.

Damage is what a crash can really leave behind, plus worse for derived files:

* ``torn-log``: the bytes of a write in progress at the tail of an active segment (a random
  prefix of a real batch, or random bytes) — for data partitions and for the transaction log;
* ``index``: an ``.index`` / ``.timeindex`` truncated, filled with garbage or deleted;
* ``snapshot``: a producer-state ``.snapshot`` cut, corrupted or deleted;
* ``txnindex``: the aborted-transaction index cut or deleted.

Acknowledged bytes themselves are never touched: losing them is what a crash must not do, and
damage *inside* acknowledged data is bit rot, which no fsync policy prevents.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.process import BrokerProcess
from oncelog_tools.verify.checker import Anomaly

TOPICS = ("orders", "inventory")
PARTITIONS = 2


@dataclass
class TornResult:
    rounds: int = 0
    acked: int = 0
    aborted: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    anomalies: list[Anomaly] = field(default_factory=list)
    seconds: float = 0.0


def _damage(data_dir: Path, rng: random.Random, result: TornResult) -> None:
    def note(kind: str) -> None:
        result.faults[kind] = result.faults.get(kind, 0) + 1

    part_dirs = [d for d in data_dir.iterdir() if d.is_dir() and d.name.rpartition("-")[0] in (*TOPICS, "__transaction_state")]
    for d in part_dirs:
        logs = sorted(d.glob("*.log"))
        if not logs:
            continue
        active = logs[-1]
        if d.name.startswith("__transaction_state") and active.stat().st_size == 0:
            continue
        roll = rng.random()
        if roll < 0.5:
            with open(active, "ab") as f:
                if rng.random() < 0.5 and active.stat().st_size > 61:
                    # a random prefix of the batch at the start of the file: a torn real batch
                    head = active.read_bytes()[: rng.randint(1, min(active.stat().st_size - 1, 4096))]
                    f.write(head)
                else:
                    f.write(os.urandom(rng.randint(1, 200)))
            note("torn-log")
        for idx in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
            r = rng.random()
            if r < 0.15:
                idx.unlink()
                note("index")
            elif r < 0.3:
                with open(idx, "r+b") as f:
                    f.truncate(max(0, idx.stat().st_size - rng.randint(1, 16)))
                note("index")
            elif r < 0.4:
                with open(idx, "ab") as f:
                    f.write(os.urandom(rng.randint(1, 24)))
                note("index")
        for snap in d.glob("*.snapshot"):
            r = rng.random()
            if r < 0.3:
                snap.unlink()
                note("snapshot")
            elif r < 0.6:
                data = bytearray(snap.read_bytes())
                if data:
                    data[rng.randrange(len(data))] ^= 0xFF
                    snap.write_bytes(bytes(data))
                note("snapshot")
        txnidx = d / "aborted.txnindex"
        if txnidx.exists() and rng.random() < 0.5:
            if rng.random() < 0.5:
                txnidx.unlink()
            else:
                with open(txnidx, "r+b") as f:
                    f.truncate(max(0, txnidx.stat().st_size - rng.randint(1, 40)))
            note("txnindex")


def run(work: Path, rounds: int, seed: int, per_round: int = 200) -> TornResult:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    rng = random.Random(seed)
    result = TornResult()
    start = time.monotonic()
    broker = BrokerProcess(work / "data", log_path=work / "broker.log")
    broker.start()
    committed: set[bytes] = set()
    aborted: set[bytes] = set()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in TOPICS]).values():
            f.result(30)
        for r in range(rounds):
            txp = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"torn-{seed}",
                            "linger.ms": 2})
            txp.init_transactions(60)
            idp = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2})
            acked: list[bytes] = []
            idp_cb = lambda err, msg: acked.append(msg.value()) if err is None else None  # noqa: E731
            for i in range(per_round):
                value = f"r{r}-i{i}".encode()
                idp.produce(TOPICS[i % 2], value, partition=rng.randrange(PARTITIONS), on_delivery=idp_cb)
                if i % 10 == 0:
                    txp.begin_transaction()
                    vals = [f"r{r}-t{i}-{k}".encode() for k in range(rng.randint(1, 6))]
                    for k, v in enumerate(vals):
                        txp.produce(TOPICS[k % 2], v, partition=rng.randrange(PARTITIONS))
                    txp.flush(30)
                    if rng.random() < 0.3:
                        txp.abort_transaction(30)
                        aborted.update(vals)
                        result.aborted += len(vals)
                    else:
                        txp.commit_transaction(30)
                        committed.update(vals)
                idp.poll(0)
            assert idp.flush(60) == 0
            committed.update(acked)
            result.acked = len(committed)
            if rng.random() < 0.5:
                broker.kill()
                result.faults["sigkill"] = result.faults.get("sigkill", 0) + 1
            else:
                broker.stop()  # a clean stop writes producer snapshots, which then get damaged
                result.faults["sigterm"] = result.faults.get("sigterm", 0) + 1
            _damage(broker.data_dir, rng, result)
            broker.start(timeout=60)
            result.rounds += 1
        # the final check: read everything with read_committed
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "torn-check", "enable.auto.commit": False,
                      "isolation.level": "read_committed"})
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in TOPICS for p in range(PARTITIONS)])
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + 60
        idle_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - idle_since < 3:
            msgs = [m for m in c.consume(10_000, 0.5) if not m.error()]
            if msgs:
                idle_since = time.monotonic()
            for m in msgs:
                seen[m.value()] = seen.get(m.value(), 0) + 1
        c.close()
        for v in sorted(committed - set(seen)):
            result.anomalies.append(Anomaly("lost", f"{v!r} acknowledged but not read back"))
        for v, n in sorted(seen.items()):
            if n > 1:
                result.anomalies.append(Anomaly("duplicate", f"{v!r} read {n} times"))
            if v in aborted:
                result.anomalies.append(Anomaly("aborted-read", f"{v!r} from an aborted transaction"))
    finally:
        broker.stop()
    result.seconds = time.monotonic() - start
    return result

"""``python -m bench.share_groups [--cluster] [records] [consumer counts...]``: share-group
throughput (KIP-932, issue 30): one broker process (embedded, local files; ``--cluster``: in
cluster mode on a PostgreSQL server of its own, ``oncelog.testing.pgserver``, where every
acknowledgement is a store transaction, cluster/share_state.py), one topic of ONE partition
holding ``records`` records (100 bytes, batches of 50), consumed by 1, 4 and 8 confluent-kafka
ShareConsumers of one share group (implicit acknowledgement: each poll accepts the previous),
each in its own process, all in the same run on the same broker. Reported per count: the time
from the consumers' start until every record is accepted, records/s, and how the records split
among the consumers. Each count uses its own topic (same content), so no run sees another's state.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path

BATCH = 50


def _consume(bootstrap: str, group: str, topic: str, total: int, counter, start_evt, done_evt, out) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    start_evt.wait(60)
    mine = 0
    deadline = time.monotonic() + 300
    while not done_evt.is_set() and time.monotonic() < deadline:
        msgs = c.poll(0.2)
        got = sum(1 for m in (msgs or []) if m.error() is None)
        if got:
            mine += got
            with counter.get_lock():
                counter.value += got
                if counter.value >= total:
                    done_evt.set()
    c.commit_sync(30)
    out.put(mine)
    c.close()


def main() -> None:
    args = sys.argv[1:]
    cluster = "--cluster" in args
    args = [a for a in args if a != "--cluster"]
    total = int(args[0]) if args else 100_000
    counts = [int(a) for a in args[1:]] or [1, 4, 8]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from kafka_clients import create_topic, produce  # noqa: E402

    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from oncelog.process import BrokerProcess

    tmp = Path(tempfile.mkdtemp(prefix="bench-share-"))
    pg = None
    store = None
    if cluster:
        from oncelog.testing.pgserver import PgServer

        pg = PgServer().start()
        store = pg.create_database("share_bench")
    b = BrokerProcess(tmp / "broker", store=store, overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start(timeout=60)
    print(f"mode: {'cluster (PostgreSQL store)' if cluster else 'embedded'}", flush=True)
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for n in counts:
            topic, group = f"share-bench-{n}", f"share-bench-{n}"
            create_topic("confluent", b.bootstrap, topic, 1)
            produce("confluent", b.bootstrap, topic, [(0, None, b"x" * 100) for _ in range(total)],
                    extra={"batch.num.messages": BATCH, "linger.ms": 20})
            res = ConfigResource("GROUP", group, incremental_configs=[ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
            for fut in admin.incremental_alter_configs([res]).values():
                fut.result(30)
            ctx = mp.get_context("spawn")
            counter, start_evt, done_evt, out = ctx.Value("q", 0), ctx.Event(), ctx.Event(), ctx.Queue()
            procs = [ctx.Process(target=_consume, args=(b.bootstrap, group, topic, total, counter, start_evt,
                                                        done_evt, out)) for _ in range(n)]
            for p in procs:
                p.start()
            time.sleep(2)  # the consumers are created and subscribed
            t0 = time.monotonic()
            start_evt.set()
            done_evt.wait(300)
            elapsed = time.monotonic() - t0
            split = sorted((out.get(timeout=60) for _ in procs), reverse=True)
            for p in procs:
                p.join(60)
            print(f"{n} consumer(s), 1 partition: {counter.value} of {total} records in {elapsed:.2f} s = "
                  f"{counter.value / elapsed:,.0f} records/s; per consumer {split}", flush=True)
    finally:
        b.stop()
        if pg is not None:
            pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

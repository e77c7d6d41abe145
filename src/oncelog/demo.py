"""``make demo``: an embedded broker and a real client pipeline, ending in a verification table.

Until the exactly-once Spark pipeline lands (issue 6) this demo shows the foundation it stands
on: a broker process; confluent-kafka producers writing the seed's orders and inventory topics
with acks=all; a SIGKILL of the broker in the middle of the stream and a restart; then a reader
that checks that every acknowledged record is there exactly once, in order. Exit status 1 on any
difference.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from oncelog.process import BrokerProcess

console = Console()
ORDERS = 20_000


def main() -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(".demo")
    shutil.rmtree(work, ignore_errors=True)
    broker = BrokerProcess(work / "data", log_path=work / "broker.log")
    t0 = time.monotonic()
    broker.start()
    console.print(f"[green]broker ready[/green] on {broker.bootstrap} (data in {broker.data_dir})")
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("inventory", 3, 1)]).values():
            f.result(timeout=30)

        acked: dict[str, dict[int, list[bytes]]] = {"orders": {}, "inventory": {}}

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                acked[msg.topic()].setdefault(msg.partition(), []).append(msg.value())

        conf = {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000}
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("producing orders and reservations", total=ORDERS)
            half = ORDERS // 2
            for phase, (lo, hi) in enumerate(((0, half), (half, ORDERS))):
                p = Producer(conf)
                for i in range(lo, hi):
                    order = f'{{"order":{i},"sku":"sku-{i % 97}","qty":{1 + i % 5}}}'.encode()
                    reserve = f'{{"order":{i},"sku":"sku-{i % 97}","reserve":{1 + i % 5}}}'.encode()
                    key = f"order-{i}".encode()
                    for topic, value in (("orders", order), ("inventory", reserve)):
                        while True:
                            try:
                                p.produce(topic, value=value, key=key, on_delivery=on_delivery)
                                break
                            except BufferError:
                                p.poll(0.05)
                    p.poll(0)
                    progress.update(task, completed=i + 1)
                assert p.flush(60) == 0
                if phase == 0:
                    progress.console.print("[yellow]kill -9 the broker[/yellow] after the first half was acknowledged")
                    broker.kill()
                    broker.start()
                    progress.console.print("[green]broker restarted[/green]")

        found: dict[str, dict[int, list[bytes]]] = {"orders": {}, "inventory": {}}
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "demo-check", "enable.auto.commit": False})
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in found for p in range(3)])
        expected_total = sum(len(v) for t in acked.values() for v in t.values())
        got = 0
        deadline = time.monotonic() + 60
        while got < expected_total and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=0.5):
                if m.error():
                    continue
                found[m.topic()].setdefault(m.partition(), []).append(m.value())
                got += 1
        c.close()

        table = Table(title="verification (read back after kill -9 and restart)")
        for col in ("topic", "acknowledged", "found", "missing", "duplicates", "order kept"):
            table.add_column(col, justify="right")
        ok = True
        for topic in ("orders", "inventory"):
            a = [v for p in sorted(acked[topic]) for v in acked[topic][p]]
            f = [v for p in sorted(found[topic]) for v in found[topic][p]]
            missing = len(set(a) - set(f))
            dups = len(f) - len(set(f))
            order = all(found[topic].get(p, [])[: len(acked[topic][p])] == acked[topic][p] for p in acked[topic])
            ok &= missing == 0 and dups == 0 and order and len(a) == ORDERS
            table.add_row(topic, str(len(a)), str(len(f)), str(missing), str(dups), "yes" if order else "NO")
        console.print(table)
        console.print(f"wall time {time.monotonic() - t0:.1f}s")
        console.print("[bold green]PASS[/bold green]" if ok else "[bold red]FAIL[/bold red]")
        return 0 if ok else 1
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())

"""The exactly-once pipeline on a Spark standalone cluster: a master and two workers on this
machine, started from the pyspark package (``bin/spark-class``), all bound to 127.0.0.1 (R24).

Not a test (it takes a minute or two and three extra JVMs): a documented demonstration, with
its result in docs/SPARK.md.

1. An ``oncelog broker``; topic ``in`` (4 partitions) filled with ``--records`` records; topic
   ``out`` (4 partitions).
2. ``org.apache.spark.deploy.master.Master`` and two ``org.apache.spark.deploy.worker.Worker``
   (1 core, 1 GiB each), each waited for in its log.
3. A driver in this process, ``--master spark://127.0.0.1:<port>``: ``in`` → map → ``out`` with
   the exactly-once sink, Trigger.AvailableNow, several micro-batches. The executors run this
   virtualenv's Python (``spark.pyspark.python``), where ``oncelog`` is installed — Spark
   imports the connector in its Python workers, so it must be installed, not shipped.
4. After the first micro-batch is committed, one executor JVM (``CoarseGrainedExecutorBackend``)
   is SIGKILLed with its Python workers: its tasks are lost, Spark runs them again on the other
   executor, and the worker starts a new executor.
5. The output is read with read_committed: exactly the input, once; the input offsets committed
   in the output transactions equal the input's end.

    .venv/bin/python bench/spark_standalone.py [--records 200000] [--keep]

Exit status 0 when the output is exact. Every wait is bounded; every process started here is
stopped on exit (``--keep`` keeps the work directory with the logs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.process import BrokerProcess, free_port
from oncelog_tools.spark.procs import descendants, kill_tree

PARTITIONS = 4
HOST = "127.0.0.1"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class Daemon:
    """A Spark master or worker JVM started with ``bin/spark-class``, logging to a file."""

    def __init__(self, name: str, args: list[str], work: Path) -> None:
        self.name = name
        self.log = work / f"{name}.log"
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=HOST, SPARK_PUBLIC_DNS=HOST,
                   PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(work), SPARK_WORKER_DIR=str(work / f"{name}-dir"),
                   # No REST submission server (it would listen on the fixed port 6066).
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> re.Match:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            m = rx.search(self.log.read_text(errors="replace"))
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{self.name}: no {pattern!r} in its log:\n{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        kill_tree(self.proc.pid)  # executors the worker launched, if any are left
        self.proc.wait(timeout=30)


def fill(bs: str, records: int) -> None:
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 20,
                  "queue.buffering.max.messages": 1_000_000})
    body = b"v" * 92
    for i in range(records):
        p.produce("in", b"%08d" % i + body, b"%d" % i, partition=i % PARTITIONS)
        if i % 50_000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("input not written")


def read_committed(bs: str, topic: str) -> Counter:
    c = Consumer({"bootstrap.servers": bs, "group.id": "standalone-check", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: Counter = Counter()
    at_end: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(20_000, timeout=0.5):
                if m.error() is None:
                    got[m.value()] += 1
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
    finally:
        c.close()
    return got


def executors() -> list[int]:
    """Executor JVMs started by the workers (descendants of this process)."""
    return [p for p in descendants(os.getpid())
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{p}/cmdline").read_bytes()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="oncelog-standalone-"))
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"{time.monotonic() - t0:6.1f}s  {text}", flush=True)

    broker = BrokerProcess(work / "broker-data", log_path=work / "broker.log")
    daemons: list[Daemon] = []
    spark = None
    try:
        broker.start()
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("in", "out")]).values():
            f.result(30)
        fill(bs, args.records)
        say(f"broker {bs}; {args.records:,} records in 'in' ({PARTITIONS} partitions)")

        port = free_port(HOST)
        master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port),
                                   "--webui-port", str(free_port(HOST))], work)
        daemons.append(master)
        url = master.wait_for(r"Starting Spark master at (spark://\S+)").group(1)
        say(f"master {url} (pid {master.proc.pid})")
        for n in (1, 2):
            w = Daemon(f"worker{n}", ["org.apache.spark.deploy.worker.Worker", url, "--host", HOST, "--port",
                                      str(free_port(HOST)), "--webui-port", str(free_port(HOST)), "--cores", "1",
                                      "--memory", "1g", "--work-dir", str(work / f"worker{n}-dir")], work)
            daemons.append(w)
        for w in daemons[1:]:
            w.wait_for(r"Successfully registered with master")
            say(f"{w.name} registered (pid {w.proc.pid}, 1 core)")

        from oncelog_tools.spark.session import loopback_session

        spark = loopback_session(url, "oncelog-standalone", shuffle_partitions=PARTITIONS, conf={
            "spark.pyspark.python": sys.executable, "spark.executor.memory": "512m",
            "spark.executor.cores": "1", "spark.cores.max": "2"})
        say(f"driver connected; executors: {executors()}")

        ckpt = work / "checkpoint"
        df = (
            spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(-(-args.records // args.batches)))
            .load()
            .selectExpr("key", "concat(value, cast('!' as binary)) as value")
        )
        q = (
            df.writeStream.format("oncelog").option("kafka.bootstrap.servers", bs).option("topic", "out")
            .option("delivery.guarantee", "exactly_once").option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True).start()
        )
        killed: list[str] = []

        def kill_an_executor() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and q.isActive:
                if (ckpt / "commits" / "0").exists():
                    victims = executors()
                    if victims:
                        tree = kill_tree(victims[0])
                        killed.append(f"executor JVM pid {victims[0]} and {len(tree) - 1} Python workers")
                        say(f"SIGKILL {killed[-1]} (after micro-batch 0 was committed)")
                    return
                time.sleep(0.05)

        threading.Thread(target=kill_an_executor, daemon=True).start()
        if not q.awaitTermination(600):
            q.stop()
            raise RuntimeError("the query did not finish in 600 s")
        if q.exception() is not None:
            raise RuntimeError(f"the query failed: {q.exception()}")
        batches = sum(1 for p in q.recentProgress if p["numInputRows"] > 0)
        say(f"query finished: {batches} micro-batches with data; executors now: {executors()}")

        want = Counter(b"%08d" % i + b"v" * 92 + b"!" for i in range(args.records))
        got = read_committed(bs, "out")
        dups = sum(n - 1 for n in got.values() if n > 1)
        missing = sum(1 for v in want if v not in got)
        qid = json.loads((ckpt / "metadata").read_text())["id"]
        group = f"oncelog-spark-{qid}"
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], require_stable=True)
        offsets = {tp.partition: tp.offset for tp in res[group].result(30).topic_partitions}
        c = Consumer({"bootstrap.servers": bs, "group.id": "standalone-check"})
        ends = {p: c.get_watermark_offsets(TopicPartition("in", p), timeout=10)[1] for p in range(PARTITIONS)}
        c.close()
        ok = got == want and offsets == ends and bool(killed)
        say(f"output (read_committed): {sum(got.values()):,} records, {dups} duplicates, {missing} missing; "
            f"input offsets committed with the output: {'= the input end' if offsets == ends else offsets}")
        print("PASS" if ok else "FAIL" + ("" if killed else " (no executor was killed)"))
        return 0 if ok else 1
    finally:
        if spark is not None:
            spark.stop()
        for d in reversed(daemons):
            d.stop()
        broker.stop()
        if args.keep:
            print(f"logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end throughput of a Spark pipeline on the ``oncelog`` connector: exactly-once versus
at-least-once sink (issue 6; targets: exactly-once costs at most 10% over at-least-once, and at
least 100,000 records/s end to end on this 2-core machine).

Not a test: a measurement. One ``oncelog broker`` process; one SparkSession ``local[2]`` in this
process; an input topic (``--partitions``, 2 by default: one task per core) filled beforehand
with ``--records`` records of ``--size`` (100) bytes. Each run is a fresh query, fresh
checkpoint, fresh output topic with the same number of partitions:

    readStream.format("oncelog")  (read_committed, from earliest)
      .selectExpr("key", "concat(substring(value, 2), substring(value, 1, 1)) as value")  -- map only
      .writeStream.format("oncelog").option("delivery.guarantee", <mode>)
      .trigger(availableNow=True)

timed from ``start()`` to the query's termination, when — in both modes — every output record
is acknowledged and, in exactly-once mode, committed (visible to read_committed consumers).
That is the end-to-end rate: records in / wall time, Spark's per-batch overhead included
(``--max-offsets`` sets the micro-batch size; the default reads everything in ``--batches``
micro-batches). Every run's output is then counted with a read_committed consumer (not timed):
exactly ``--records`` or the run is reported as wrong.

Runs alternate between the modes, and which goes first alternates too, so that the load of the
other processes on this shared machine falls on both alike; the first (warm-up) pair starts the
Python workers and is not counted. Medians are reported with the median of the per-pair ratios.

    nice -n 10 .venv/bin/python bench/spark_pipeline.py --records 1000000 --pairs 3 [--markdown out.md]
    .venv/bin/python bench/spark_pipeline.py --records 1000000 --pairs 1 --profile /tmp/prof

``--profile DIR`` records the Python workers (the connector's reader and writer) with py-spy
during the measured runs and prints the functions with the most samples.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.process import BrokerProcess
from oncelog_tools.spark.procs import descendants

MODES = ("at_least_once", "exactly_once")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Write the input (not timed in the pipeline's figures); returns records/s."""
    p = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000, "delivery.report.only.error": True,
    })
    failed: list = []
    t0 = time.perf_counter()
    body = b"v" * (size - 8)
    for i in range(records):
        value = b"%08d" % i + body
        while True:
            try:
                p.produce(topic, value, b"%d" % i, partition=i % partitions, on_delivery=lambda e, m: failed.append(e))
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(300)
    if left or failed:
        raise RuntimeError(f"input not written: {left} left, {len(failed)} failed")
    return records / (time.perf_counter() - t0)


def count_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 300.0) -> int:
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-count", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed",
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n, at_end = 0, set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"counting {topic}: {n} so far")
            for m in c.consume(20_000, timeout=0.5):
                err = m.error()
                if err is None:
                    n += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                else:
                    raise RuntimeError(err)
    finally:
        c.close()
    return n


def cpu_seconds() -> dict[int, float]:
    """CPU time (user + system) so far of this process and all its descendants: the driver,
    the JVM, the Python workers, the broker."""
    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return out


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def run_query(spark, bootstrap: str, mode: str, out: str, ckpt: Path, max_offsets: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """One run; returns (seconds from start() to termination, micro-batches with data)."""
    df = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
        .selectExpr("key", "concat(substring(value, 2), substring(value, 1, 1)) as value")
    )
    w = (
        df.writeStream.format("oncelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("delivery.guarantee", mode)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
    )
    t0 = time.perf_counter()
    q = w.start()
    if not q.awaitTermination(900):
        q.stop()
        raise TimeoutError(f"{mode} run did not finish in 900 s")
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(f"{mode} run failed: {q.exception()}")
    return wall, sum(1 for p in q.recentProgress if p["numInputRows"] > 0)


class Profiler:
    """py-spy over the Python worker daemon and its forks (SIGINT ends the recording)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        # One daemon per kind of Python worker; the tasks' read() and write() run in the
        # forks of the ``pyspark.worker`` one.
        daemons = [p for p in descendants(os.getpid()) if _cmdline(p).endswith(b"pyspark.daemon\0pyspark.worker\0")]
        if not daemons:
            raise RuntimeError("no pyspark.daemon process to profile (run a warm-up first)")
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.proc = subprocess.Popen(
            [spy, "record", "--pid", str(daemons[0]), "--subprocesses", "--rate", "200", "--format", "raw",
             "--output", str(self.out), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)

    def report(self, top: int = 25) -> str:
        """Functions by samples where they are on the stack (inclusive) and on top (self)."""
        incl: Counter = Counter()
        self_: Counter = Counter()
        total = 0
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
            n = int(count)
            total += n
            if not frames:
                continue
            self_[_short(frames[-1])] += n
            for f in set(_short(f) for f in frames):
                incl[f] += n
        lines = [f"{total} samples (idle workers waiting on sockets included)", "", "self:"]
        lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in self_.most_common(top)]
        lines += ["", "inclusive, connector and client frames:"]
        lines += [
            f"  {100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(200)
            if "spark/" in f or "confluent" in f or "pyarrow" in f
        ][:top]
        return "\n".join(lines)


def _short(frame: str) -> str:
    # py-spy raw frames: "function (path/to/file.py:line)"
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batches", type=int, default=4, help="micro-batches per run (sets maxOffsetsPerTrigger)")
    ap.add_argument("--max-offsets", type=int, default=0, help="maxOffsetsPerTrigger (overrides --batches)")
    ap.add_argument("--pairs", type=int, default=3, help="measured pairs of runs (after one warm-up pair)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy the workers during the measured runs")
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args()
    max_offsets = args.max_offsets or -(-args.records // args.batches)

    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-spark-"))
    broker = BrokerProcess(work / "data", log_path=work / "broker.log")
    broker.start()
    try:
        bs = broker.bootstrap
        create_topic(bs, "in", args.partitions)
        rate = fill(bs, "in", args.records, args.size, args.partitions)
        print(f"input: {args.records:,} records of {args.size} B in {args.partitions} partitions ({rate:,.0f} rec/s to write)")

        from oncelog_tools.spark.session import loopback_session

        t0 = time.perf_counter()
        spark = loopback_session(args.master, "oncelog-bench", shuffle_partitions=args.partitions)
        print(f"SparkSession {args.master} in {time.perf_counter() - t0:.1f} s; "
              f"maxOffsetsPerTrigger {max_offsets:,}; load average {os.getloadavg()[0]:.1f}")

        results: dict[str, list[float]] = {m: [] for m in MODES}
        cpu: dict[str, list[float]] = {m: [] for m in MODES}
        ratios: list[float] = []
        profiler = Profiler(args.profile / "workers.raw") if args.profile else None
        run = 0
        for pair in range(args.pairs + 1):
            order = MODES if pair % 2 == 0 else MODES[::-1]
            if pair == 1 and profiler:
                args.profile.mkdir(parents=True, exist_ok=True)
                profiler.start()
            got: dict[str, float] = {}
            for mode in order:
                run += 1
                out = f"out-{run}"
                create_topic(bs, out, args.partitions)
                c0 = cpu_seconds()
                wall, batches = run_query(spark, bs, mode, out, work / f"ckpt-{run}", max_offsets)
                cpu_per_m = cpu_used(c0, cpu_seconds()) / args.records * 1e6
                n = count_committed(bs, out, args.partitions)
                ok = "" if n == args.records else f"  WRONG: {n:,} records in the output"
                tag = "warm-up" if pair == 0 else f"pair {pair}"
                print(f"{tag:8} {mode:14} {wall:6.2f} s  {args.records / wall:10,.0f} rec/s  {batches} batches  "
                      f"{cpu_per_m:5.1f} CPU s per million records  (load {os.getloadavg()[0]:.1f}){ok}", flush=True)
                if n != args.records:
                    return 1
                got[mode] = args.records / wall
                if pair > 0:
                    cpu[mode].append(cpu_per_m)
            if pair > 0:
                for m in MODES:
                    results[m].append(got[m])
                ratios.append(got["exactly_once"] / got["at_least_once"])
        if profiler:
            profiler.stop()
        spark.stop()

        med = {m: statistics.median(v) for m, v in results.items()}
        cost = 1 - statistics.median(ratios)
        lines = [
            "| mode | runs | median rec/s | min | max | median CPU s per million records (all processes) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for m in MODES:
            v = results[m]
            lines.append(f"| {m} | {len(v)} | {med[m]:,.0f} | {min(v):,.0f} | {max(v):,.0f} | {statistics.median(cpu[m]):.1f} |")
        summary = (
            f"\n{args.records:,} records × {args.size} B, {args.partitions} partitions, {args.master}, "
            f"maxOffsetsPerTrigger {max_offsets:,}; exactly-once / at-least-once per pair: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + f" → exactly-once costs {100 * cost:.1f}% (median of pairs); load average {os.getloadavg()[0]:.1f}"
        )
        text = "\n".join(lines) + summary
        print("\n" + text)
        if args.markdown:
            args.markdown.write_text(text + "\n")
        if profiler:
            print("\n" + profiler.report())
        return 0
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

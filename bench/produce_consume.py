"""Produce and consume throughput of an ``oncelog broker`` process, with confluent-kafka.

Not a test: a measurement. For each record size (100 B and 1 KiB by default) it

1. starts a broker process on an empty data directory (``oncelog.process.BrokerProcess``, the
   real command line) and records its startup time, from ``Popen`` to the ready line;
2. creates a topic with several partitions and produces N records with acks=all (one
   confluent-kafka producer, no compression), timing from the first ``produce()`` to the end of
   ``flush()``;
3. consumes them all back (assign from the beginning), timing from ``assign`` to the last record;
4. reads everything again ``--raw-fetch-rounds`` times with a minimal fetch client that never
   looks inside record batches: the broker's own cost of serving large fetches (real clients
   spend far more per record than the broker does, so they hide it);
5. samples the broker's resident set size (psutil) every 100 ms during each phase and once more
   after a second of idleness, and its CPU time (user + system) per phase; and measures the
   broker's startup time once more on the now non-empty data directory (restart after SIGTERM).

It prints a table and, with ``--markdown FILE``, writes the same table as Markdown. With
``--event-loop asyncio,uvloop`` each configuration runs once per event loop, which is how the
broker's default loop was chosen (docs/PERFORMANCE.md).

    .venv/bin/python -m bench.produce_consume --records 500000 --event-loop asyncio,uvloop \
        --markdown /tmp/bench.md

Every wait is bounded; the broker process is stopped (SIGTERM, then SIGKILL) on any exit.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

if not __package__:  # run as a script (bench/produce_consume.py): make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RssSampler, md_table  # noqa: E402
from oncelog.process import BrokerProcess  # noqa: E402

MB = 1_000_000


@dataclass
class Phase:
    records: int = 0
    nbytes: int = 0  # record values only (keys are null)
    seconds: float = 0.0
    rss_max: int = 0
    broker_cpu_s: float = 0.0  # user + system CPU time the broker process spent in the phase

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.nbytes / MB / self.seconds if self.seconds else 0.0


@dataclass
class Result:
    loop: str
    size: int
    partitions: int
    startup_empty_s: float = 0.0
    startup_data_s: float = 0.0
    produce: Phase = field(default_factory=Phase)
    consume: Phase = field(default_factory=Phase)
    raw_fetch: Phase = field(default_factory=Phase)
    rss_idle: int = 0
    rss_start: int = 0
    disk_bytes: int = 0


def _start_timed(broker: BrokerProcess) -> float:
    """Start the broker; seconds from Popen to its ready line (BrokerProcess.start does nothing
    but open its log file before Popen and returns as soon as the ready line is read)."""
    t0 = time.perf_counter()
    broker.start(timeout=60)
    return time.perf_counter() - t0


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(timeout=60)


def _produce(bootstrap: str, topic: str, n: int, size: int, partitions: int, timeout: float) -> Phase:
    from confluent_kafka import Producer

    errors: list[str] = []
    acked = [0]

    def on_delivery(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked[0] += 1

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "none",
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 512 * 1024,
        }
    )
    value = b"x" * size
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError("producer queue did not drain")
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(max(deadline - time.monotonic(), 1.0))
    seconds = time.perf_counter() - t0
    if left or errors or acked[0] != n:
        raise RuntimeError(f"produce: {left} undelivered, {len(errors)} errors ({errors[:3]}), {acked[0]} of {n} acked")
    return Phase(records=n, nbytes=n * size, seconds=seconds)


def _consume(bootstrap: str, topic: str, n: int, partitions: int, timeout: float) -> Phase:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "oncelog-bench",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got = 0
    nbytes = 0
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    try:
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumed {got} of {n} records in {timeout}s")
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error():
                    raise RuntimeError(f"consumer error: {m.error()}")
                got += 1
                nbytes += len(m.value())
        seconds = time.perf_counter() - t0
    finally:
        c.close()
    if got != n:
        raise RuntimeError(f"consumed {got} records, {n} expected")
    return Phase(records=got, nbytes=nbytes, seconds=seconds)


def _raw_fetch(bootstrap: str, topic: str, ends: dict[int, int], rounds: int, timeout: float) -> Phase:
    """Fetch every partition from offset 0 to its end ``rounds`` times with a minimal client
    that never looks inside record batches (only the last batch header of each partition, to
    know where to continue): the broker's own cost of serving large fetches, without a real
    client's per-record work. One connection, one request in flight, like a consumer."""
    import datetime

    from oncelog.client import ProtocolClient
    from oncelog.protocol import apis

    m = apis.message_module_classes(apis.FETCH, 11, False)
    nbytes = 0
    records = 0
    deadline = time.monotonic() + timeout
    with ProtocolClient(bootstrap, timeout=30) as c:
        t0 = time.perf_counter()
        for _ in range(rounds):
            pos = {p: 0 for p in ends}
            while any(pos[p] < ends[p] for p in ends):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"raw fetch not done in {timeout}s")
                req = m["FetchRequest"](
                    replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=52_428_800,
                    isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                    topics=(m["FetchTopic"](topic=topic, partitions=tuple(
                        m["FetchPartition"](partition=p, current_leader_epoch=-1, fetch_offset=pos[p],
                                            log_start_offset=-1, partition_max_bytes=1_048_576)
                        for p in ends if pos[p] < ends[p])),),
                )
                res = c.request(apis.FETCH, req, version=11)
                for t in res.responses:
                    for part in t.partitions:
                        if part.error_code:
                            raise RuntimeError(f"fetch {topic}-{part.partition_index}: error {part.error_code}")
                        data = part.records or b""
                        nbytes += len(data)
                        last = _last_batch_start(data)
                        if last >= 0:
                            base, delta = _BASE.unpack_from(data, last)[0], _DELTA.unpack_from(data, last + 23)[0]
                            records += base + delta + 1 - pos[part.partition_index]
                            pos[part.partition_index] = base + delta + 1
        seconds = time.perf_counter() - t0
    return Phase(records=records, nbytes=nbytes, seconds=seconds)


_BASE = struct.Struct(">q")
_LEN = struct.Struct(">i")
_DELTA = struct.Struct(">i")


def _last_batch_start(data: bytes) -> int:
    """Position of the last whole batch in ``data`` (a walk over batch lengths), or -1."""
    pos, last = 0, -1
    while pos + 12 <= len(data):
        end = pos + 12 + _LEN.unpack_from(data, pos + 8)[0]
        if end > len(data):
            break
        last, pos = pos, end
    return last


def _disk_usage(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.log") if f.is_file())


def run_one(work: Path, loop: str, size: int, n: int, partitions: int, timeout: float, raw_rounds: int = 3) -> Result:
    res = Result(loop=loop, size=size, partitions=partitions)
    data = work / f"{loop}-{size}"
    shutil.rmtree(data, ignore_errors=True)
    broker = BrokerProcess(data, env={"ONCELOG_EVENT_LOOP": loop}, log_path=work / f"{loop}-{size}.broker.log")
    sampler = None
    try:
        res.startup_empty_s = _start_timed(broker)
        assert broker.pid is not None
        sampler = RssSampler(broker.pid)
        res.rss_start = sampler.peak()
        topic = f"bench-{size}"
        _create_topic(broker.bootstrap, topic, partitions)
        sampler.reset()
        cpu = sampler.cpu()
        res.produce = _produce(broker.bootstrap, topic, n, size, partitions, timeout)
        res.produce.rss_max, res.produce.broker_cpu_s = sampler.peak(), sampler.cpu() - cpu
        sampler.reset()
        cpu = sampler.cpu()
        res.consume = _consume(broker.bootstrap, topic, n, partitions, timeout)
        res.consume.rss_max, res.consume.broker_cpu_s = sampler.peak(), sampler.cpu() - cpu
        if raw_rounds:
            sampler.reset()
            cpu = sampler.cpu()
            ends = {p: n // partitions + (1 if p < n % partitions else 0) for p in range(partitions)}
            res.raw_fetch = _raw_fetch(broker.bootstrap, topic, ends, raw_rounds, timeout)
            res.raw_fetch.rss_max, res.raw_fetch.broker_cpu_s = sampler.peak(), sampler.cpu() - cpu
        time.sleep(1.0)
        res.rss_idle = sampler.sample()
        sampler.stop()
        sampler = None
        if broker.stop() != 0:
            raise RuntimeError(f"broker did not stop cleanly; log: {broker.log_tail()}")
        res.disk_bytes = _disk_usage(data)
        res.startup_data_s = _start_timed(broker)
    finally:
        if sampler is not None:
            sampler.stop()
        try:
            broker.stop()
        finally:
            broker.kill()
    shutil.rmtree(data, ignore_errors=True)
    return res


def startup_times(work: Path, loop: str, runs: int) -> list[float]:
    """Startup on an empty data directory, ``runs`` times."""
    out = []
    for i in range(runs):
        data = work / f"startup-{loop}-{i}"
        broker = BrokerProcess(data, env={"ONCELOG_EVENT_LOOP": loop}, log_path=work / f"startup-{loop}-{i}.log")
        try:
            out.append(_start_timed(broker))
        finally:
            broker.stop()
            broker.kill()
        shutil.rmtree(data, ignore_errors=True)
    return out


THROUGHPUT = ("loop", "record", "produce rec/s", "produce MB/s", "broker CPU s", "consume rec/s", "consume MB/s",
              "broker CPU s", "raw fetch MB/s", "broker CPU s/GB")
RESOURCES = ("loop", "record", "RSS start (MB)", "RSS produce (MB)", "RSS consume (MB)", "RSS raw fetch (MB)",
             "RSS idle (MB)", "data on disk (MB)", "startup empty (s)", "startup with data (s)")


def throughput_rows(results: list[Result]) -> list[tuple[str, ...]]:
    out = []
    for r in results:
        raw = r.raw_fetch
        per_gb = raw.broker_cpu_s / (raw.nbytes / 1e9) if raw.nbytes else 0.0
        out.append((
            r.loop, f"{r.size} B",
            f"{r.produce.rate:,.0f}", f"{r.produce.mbps:.1f}", f"{r.produce.broker_cpu_s:.2f}",
            f"{r.consume.rate:,.0f}", f"{r.consume.mbps:.1f}", f"{r.consume.broker_cpu_s:.2f}",
            f"{raw.mbps:.0f}", f"{per_gb:.2f}",
        ))
    return out


def resource_rows(results: list[Result]) -> list[tuple[str, ...]]:
    return [
        (
            r.loop, f"{r.size} B", f"{r.rss_start / MB:.0f}", f"{r.produce.rss_max / MB:.0f}",
            f"{r.consume.rss_max / MB:.0f}", f"{r.raw_fetch.rss_max / MB:.0f}", f"{r.rss_idle / MB:.0f}",
            f"{r.disk_bytes / MB:.0f}", f"{r.startup_empty_s:.2f}", f"{r.startup_data_s:.2f}",
        )
        for r in results
    ]


def markdown(results: list[Result], n: int, partitions: int, startups: dict[str, list[float]],
             load_before: tuple[float, ...]) -> str:
    lines = [
        f"Machine: {platform.machine()}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}. "
        f"{n:,} records per run into {partitions} partitions, acks=all, no compression; "
        f"load average (1, 5, 15 min) before: {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after: {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}.",
        "",
        *md_table(THROUGHPUT, throughput_rows(results)),
        "",
        *md_table(RESOURCES, resource_rows(results)),
        "",
    ]
    for loop, times in startups.items():
        lines.append(
            f"Startup on an empty data directory ({loop}, {len(times)} runs, Popen to ready line): "
            f"median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s."
        )
    return "\n".join(lines) + "\n"


def print_table(headers: tuple[str, ...], body: list[tuple[str, ...]]) -> None:
    table = [headers, *body]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for j, row in enumerate(table):
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
        if j == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000, help="records per run (default 300000)")
    ap.add_argument("--sizes", default="100,1024", help="record value sizes in bytes (default 100,1024)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--event-loop", default="asyncio",
                    help="comma-separated ONCELOG_EVENT_LOOP values: asyncio (the broker's default), uvloop")
    ap.add_argument("--startup-runs", type=int, default=5)
    ap.add_argument("--raw-fetch-rounds", type=int, default=3, help="passes of the raw fetch client over the data")
    ap.add_argument("--timeout", type=float, default=600.0, help="bound on each produce/consume phase (s)")
    ap.add_argument("--work-dir", type=Path, default=None, help="default: a temporary directory, removed after")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the results as Markdown here")
    args = ap.parse_args(argv)
    loops = [x.strip() for x in args.event_loop.split(",") if x.strip()]
    sizes = [int(x) for x in args.sizes.split(",")]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="oncelog-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    startups: dict[str, list[float]] = {}
    load_before = psutil.getloadavg()
    try:
        for loop in loops:
            startups[loop] = startup_times(work, loop, args.startup_runs)
            for size in sizes:
                print(f"# {loop}: {args.records:,} records of {size} B ...", file=sys.stderr, flush=True)
                results.append(run_one(work, loop, size, args.records, args.partitions, args.timeout, args.raw_fetch_rounds))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(THROUGHPUT, throughput_rows(results))
    print()
    print_table(RESOURCES, resource_rows(results))
    print()
    text = markdown(results, args.records, args.partitions, startups, load_before)
    print(text.rsplit("\n\n", 1)[-1].strip())
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

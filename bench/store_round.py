"""``python -m bench.store_round [--dsn DSN] [--partitions 24] [--in-flight 4] [--committers 1]
[--seconds 5] [--repeat 3] [--compare OLD_SRC NEW_SRC] [--profile FILE]``

What one group-commit round of the PostgreSQL engine costs the broker in CPU, under load: the
store rounds alone, as a broker's event loop drives them (storage/store_log.py ``submit``, then
``await`` of its ``PendingAppend``), without sockets or request decoding. ``--partitions`` P
partitions are led by one process; on its event loop, ``--in-flight`` K coroutines per
partition each append a 10-record batch (1 KB) and await its COMMIT, back to back, so up to
P×K batches are in flight, through ``--committers`` group committers (``CommitterPool``, as
``store.commit.connections``). Over a ``--seconds`` window after a warm-up: batches and rounds
(database transactions) committed, and the CPU of the bench process (every thread: the event
loop and the committers) and of PostgreSQL (the postmaster and its children). Reported per
batch and per round: broker CPU µs, PostgreSQL CPU µs; and batches per round.

``--compare OLD_SRC NEW_SRC``: the same measurement run ``--repeat`` times alternately with
``PYTHONPATH=OLD_SRC`` and ``NEW_SRC`` (two source trees of oncelog, e.g. a ``git worktree add
--detach /tmp/x main`` with its C extension built in place, and this checkout's ``src``), each
run a fresh process on a fresh database of one PostgreSQL server, so before and after are
measured on one machine in one run. Without ``--dsn`` a PostgreSQL server is started in a
temporary directory (``oncelog.testing.pgserver``: fsync and synchronous_commit on) and removed
afterwards; ``--dsn URL`` uses a running server instead (the device kit's ``$ONCELOG_PG_DSN``). ``--profile FILE``: the child runs under ``py-spy record`` (collapsed stacks of every
thread, idle frames left out) into FILE, for the breakdown of where a round's CPU goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WARMUP_S = 2.0


def _thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's Python threads, added up by name (the event loop's
    is the main thread's; digits dropped, so the committers add up under one name)."""
    import threading

    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        name = "".join(c for c in t.name if not c.isdigit()).rstrip("-") or "?"
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        out[name + " (sys)"] = out.get(name + " (sys)", 0.0) + int(fields[12]) / tick
    return out


def _measure(dsn: str, partitions: int, in_flight: int, committers: int, seconds: float,
             profile: str | None = None) -> dict[str, Any]:
    """One measurement in this process (the child)."""
    import psutil
    import psycopg

    from bench.common import cpu_seconds
    from oncelog.cluster import leadership, schema
    from oncelog.cluster.connection import StoreConnection
    from oncelog.protocol import records as R
    from oncelog.storage.config import LogConfig
    from oncelog.storage.engines.postgres.commit_pool import CommitterPool
    from oncelog.storage.engines.postgres.log import PgPartitionLog

    def connect() -> psycopg.Connection:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10)

    setup = connect()
    schema.ensure_schema(setup)
    pg_pids = [r[0] for r in setup.execute("SELECT pid FROM pg_stat_activity").fetchall()]
    reader = StoreConnection(connect)
    pool = CommitterPool(connect, committers, name="bench-commit").start()
    logs = [PgPartitionLog(reader, pool, leadership.claim(setup, "round", p, 1), LogConfig())
            for p in range(partitions)]
    batch = R.build_batch([(b"key", b"v" * 100, ())] * 10, timestamp_ms=1_000)
    header = R.parse_header(batch)
    done = [0]

    async def appender(log: PgPartitionLog, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await log.submit(batch, header)
            done[0] += 1

    def postgres() -> list[psutil.Process]:
        # the server's processes: the parent of any backend, and all its children
        try:
            parent = psutil.Process(pg_pids[0]).parent()
            return [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return []

    async def run() -> dict[str, Any]:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(appender(log, stop)) for log in logs for _ in range(in_flight)]
        await asyncio.sleep(WARMUP_S)
        procs = postgres()
        spy = None
        if profile:  # py-spy on this process for the window only (no start-up, no warm-up)
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw",
                                    "--threads", "--gil", "--rate", "500", "--output", profile,
                                    "--duration", str(int(seconds)), "--pid", str(os.getpid())],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s0, n0, c0, p0, w0 = pool.stats(), done[0], time.process_time(), cpu_seconds(procs), time.monotonic()
        t0 = _thread_cpu()
        await asyncio.sleep(seconds)
        s1, n1, c1, p1, w1 = pool.stats(), done[0], time.process_time(), cpu_seconds(procs), time.monotonic()
        t1 = _thread_cpu()
        stop.set()
        await asyncio.gather(*tasks)
        if spy is not None:
            spy.wait(60)
        batches, rounds = n1 - n0, s1.transactions - s0.transactions
        threads = {name: (t1[name] - t0.get(name, 0.0)) / batches * 1e6 if batches else 0.0 for name in t1}
        return {"thread_us_per_batch": threads, "batches_per_s": batches / (w1 - w0), "rounds_per_s": rounds / (w1 - w0),
                "batches_per_round": batches / rounds if rounds else 0.0,
                "broker_us_per_batch": (c1 - c0) / batches * 1e6 if batches else 0.0,
                "broker_us_per_round": (c1 - c0) / rounds * 1e6 if rounds else 0.0,
                "broker_cores": (c1 - c0) / (w1 - w0),
                "pg_us_per_batch": (p1 - p0) / batches * 1e6 if batches else 0.0,
                "pg_cores": (p1 - p0) / (w1 - w0), "failed_rounds": s1.failed_rounds - s0.failed_rounds}

    try:
        return asyncio.run(run())
    finally:
        pool.close(30)
        reader.close()
        setup.close()


def _child(args: argparse.Namespace) -> int:
    out = _measure(args.dsn, args.partitions, args.in_flight, args.committers, args.seconds, args.profile)
    import oncelog

    out["src"] = str(Path(oncelog.__file__).resolve().parent.parent)
    print(json.dumps(out), flush=True)
    return 0


def _spawn(args: argparse.Namespace, dsn: str, src: str | None, profile: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        # first on the path: this tree's oncelog wins over any other there (the wheels stay)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(src).resolve()), str(Path(__file__).resolve().parent.parent),
                                                        env.get("PYTHONPATH", "")] if p)
    cmd = [sys.executable, "-m", "bench.store_round", "--child", "--dsn", dsn, "--partitions", str(args.partitions),
           "--in-flight", str(args.in_flight), "--committers", str(args.committers), "--seconds", str(args.seconds)]
    if profile:
        cmd += ["--profile", profile]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 120)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise RuntimeError(f"bench child failed ({res.returncode}): {res.stderr[-2000:]}")
    return json.loads(lines[-1])


COLUMNS = (("batches_per_s", "batches/s", "{:.0f}"), ("batches_per_round", "batches/round", "{:.1f}"),
           ("broker_us_per_batch", "broker µs/batch", "{:.1f}"), ("broker_us_per_round", "broker µs/round", "{:.0f}"),
           ("broker_cores", "broker cores", "{:.2f}"), ("pg_us_per_batch", "PG µs/batch", "{:.1f}"),
           ("pg_cores", "PG cores", "{:.2f}"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_round", description=__doc__.split("\n\n")[1])
    ap.add_argument("--dsn", help="an existing PostgreSQL server's URL without a database name, e.g. "
                    "$ONCELOG_PG_DSN (a database is created on it per run; default: a temporary server)")
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--in-flight", type=int, default=4, help="appends in flight per partition")
    ap.add_argument("--committers", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", nargs=2, metavar=("OLD_SRC", "NEW_SRC"))
    ap.add_argument("--profile", help="py-spy's collapsed stacks of one run (of NEW_SRC with --compare) into this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from oncelog.testing.pgserver import PgServer

    server: Any = _Server(args.dsn) if args.dsn else PgServer().start()
    try:
        labels: list[tuple[str, str | None]] = [("old", args.compare[0]), ("new", args.compare[1])] if args.compare \
            else [("this", None)]
        print(f"{args.partitions} partitions x {args.in_flight} appends in flight, {args.committers} committer(s), "
              f"{args.seconds:.0f} s windows, load average {os.getloadavg()[0]:.2f}")
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in labels}
        for i in range(args.repeat):
            for label, src in (labels if i % 2 == 0 else labels[::-1]):
                name = f"round_{label}_{i}_{time.time_ns() % 10**9}"
                dsn = server.create_database(name)
                profile = args.profile if args.profile and i == 0 and label == labels[-1][0] else None
                r = _spawn(args, dsn, src, profile)
                results[label].append(r)
                print(f"  run {i} {label:<4} " + "  ".join(f"{h} {fmt.format(r[k])}" for k, h, fmt in COLUMNS),
                      flush=True)
                print("      broker µs/batch by thread: " + ", ".join(
                    f"{name} {us:.1f}" for name, us in sorted(r.get("thread_us_per_batch", {}).items()) if us >= 0.05),
                    flush=True)
                server.drop_database(name)
        print()
        print("| code | " + " | ".join(h for _, h, _ in COLUMNS) + " |")
        print("|---|" + "---:|" * len(COLUMNS))
        for label, runs in results.items():
            cells = []
            for k, _, fmt in COLUMNS:
                vs = [r[k] for r in runs]
                cells.append(f"{fmt.format(statistics.median(vs))} ({fmt.format(min(vs))}–{fmt.format(max(vs))})")
            print(f"| {label} | " + " | ".join(cells) + " |")
    finally:
        server.close()
    return 0


class _Server:
    """An existing PostgreSQL server (``--dsn``): databases made and dropped on it."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url.rstrip("/")
        self._admin = psycopg.connect(f"{self.url}/postgres", autocommit=True, connect_timeout=10)

    def create_database(self, name: str) -> str:
        self._admin.execute(f'CREATE DATABASE "{name}"')
        return f"{self.url}/{name}"

    def drop_database(self, name: str) -> None:
        self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        self._admin.close()


if __name__ == "__main__":
    raise SystemExit(main())

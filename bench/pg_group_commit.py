"""``python -m bench.pg_group_commit [--dsn DSN] [--seconds S] [--partitions 1 8] [--record-bytes N]``

Group commit of the PostgreSQL partition log (issue 15), measured: for each partition count P,
P threads each append to their own partition, one batch at a time (each waits for its COMMIT,
as a produce with acks=all does), through one GroupCommitter, for S seconds. Reported:
acknowledged appends per second, database transactions (COMMITs) per second, and batches per
transaction. Without ``--dsn`` a PostgreSQL server is started in a temporary directory on
loopback (tests/pgserver.py: fsync on, synchronous_commit on) and removed afterwards.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path


def _measure(dsn: str, partitions: int, seconds: float, record_bytes: int, linger_s: float,
             warmup_s: float = 3.0) -> dict:
    import psycopg

    from oncelog.cluster import leadership, schema
    from oncelog.cluster.connection import StoreConnection
    from oncelog.storage.engines.postgres.group_commit import GroupCommitter
    from oncelog.storage.engines.postgres.log import PgPartitionLog
    from oncelog.protocol import records as R
    from oncelog.storage.config import LogConfig

    def connect() -> psycopg.Connection:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10)

    setup = connect()
    schema.ensure_schema(setup)
    committer = GroupCommitter(connect, linger_s=linger_s).start()
    topic = f"bench-{partitions}-{time.time_ns()}"
    batch = R.build_batch([(b"key", b"v" * record_bytes, ())] * 10, timestamp_ms=0)
    header = R.parse_header(batch)
    stop = threading.Event()
    counts = [0] * partitions

    def work(i: int) -> None:
        reader = StoreConnection(connect)  # this thread's reads (appends go through the committer)
        log = PgPartitionLog(reader, committer, leadership.claim(reader.raw(), topic, i, 1), LogConfig())
        try:
            while not stop.is_set():
                log.append(batch, header, 0)
                counts[i] += 1
        finally:
            reader.close()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(partitions)]
    for t in threads:
        t.start()
    time.sleep(warmup_s)  # warm up (plpgsql compiled, first pages written)
    before, t0 = committer.stats(), time.monotonic()
    n0 = sum(counts)
    time.sleep(seconds)
    after, t1 = committer.stats(), time.monotonic()
    n1 = sum(counts)
    stop.set()
    for t in threads:
        t.join(30)
    committer.close(30)
    setup.close()
    elapsed = t1 - t0
    txns = after.transactions - before.transactions
    appends = after.appends - before.appends
    return {
        "partitions": partitions,
        "batch_bytes": len(batch),
        "appends_per_s": (n1 - n0) / elapsed,
        "commits_per_s": txns / elapsed,
        "batches_per_commit": appends / txns if txns else 0.0,
        "mb_per_s": (after.bytes - before.bytes) / elapsed / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pg_group_commit", description=__doc__.split("\n\n")[1])
    ap.add_argument("--dsn", help="an existing PostgreSQL database (default: a temporary server)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--record-bytes", type=int, default=100, help="value size; 10 records per batch")
    ap.add_argument("--linger-ms", type=float, default=0.0)
    args = ap.parse_args(argv)
    server = None
    dsn = args.dsn
    if dsn is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import pgserver

        server = pgserver.PgServer().start()
        dsn = server.create_database("bench")
    try:
        print(f"{'partitions':>10} {'batch B':>8} {'appends/s':>10} {'commits/s':>10} {'batches/commit':>15} {'MB/s':>6}")
        for p in args.partitions:
            r = _measure(dsn, p, args.seconds, args.record_bytes, args.linger_ms / 1000)
            print(f"{r['partitions']:>10} {r['batch_bytes']:>8} {r['appends_per_s']:>10.0f} {r['commits_per_s']:>10.0f} "
                  f"{r['batches_per_commit']:>15.2f} {r['mb_per_s']:>6.2f}", flush=True)
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

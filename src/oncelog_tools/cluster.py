"""``python -m oncelog_tools.cluster`` (``make cluster``): a PostgreSQL server and a cluster of
``oncelog broker`` processes on loopback, for trying cluster mode (issue 15, docs/CLUSTER.md).

1. PostgreSQL in a temporary directory (``oncelog.testing.pgserver``: initdb, 127.0.0.1 on a free
   port, trust on loopback only; as an unprivileged user: ``postgres`` or a dedicated one when
   run as root), and a database ``oncelog``;
2. ``--brokers`` brokers (default 3), node ids 1..N, each
   ``oncelog broker --node-id N --data-dir DIR --listen 127.0.0.1:PORT --store postgresql://…``,
   their data directories and logs under ``--dir`` (default: a new temporary directory);
3. prints the bootstrap string and the store URL, then waits for Ctrl-C / SIGTERM (or
   ``--duration`` seconds) and stops the brokers (SIGTERM: each deregisters) and PostgreSQL,
   removing PostgreSQL's directory. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from oncelog.process import BrokerProcess
from oncelog.testing.pgserver import PgServer, PostgresMissing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oncelog_tools.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    ap.add_argument("--dir", type=Path, default=None, help="where the brokers' data and logs go")
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("-o", "--override", action="append", default=[], help="a broker property key=value, to every broker")
    args = ap.parse_args(argv)
    if not 1 <= args.brokers <= 16:
        ap.error("--brokers must be between 1 and 16")
    overrides = dict(kv.split("=", 1) for kv in args.override)
    base = args.dir or Path(tempfile.mkdtemp(prefix="oncelog-cluster-"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        pg = PgServer()
    except PostgresMissing as exc:
        print(f"cannot start PostgreSQL: {exc}", file=sys.stderr)
        return 2
    brokers: list[BrokerProcess] = []
    try:
        pg.start()
        dsn = pg.create_database("oncelog")
        for n in range(1, args.brokers + 1):
            b = BrokerProcess(base / f"broker{n}", node_id=n, store=dsn, overrides=overrides)
            b.start(timeout=60)
            brokers.append(b)
            print(f"broker {n}: {b.bootstrap} (log {b.log_path})", flush=True)
        print(f"store: {dsn}", flush=True)
        print(f"bootstrap: {','.join(b.bootstrap for b in brokers)}", flush=True)
        print("Ctrl-C stops the cluster." if args.duration is None else f"stopping in {args.duration:g}s", flush=True)
        stop.wait(args.duration)
    finally:
        for b in brokers:
            try:
                b.stop(timeout=30)
            except Exception as exc:  # a broker that does not stop in time is killed
                print(f"broker {b.node_id}: {exc}; killed", file=sys.stderr)
                b.kill()
        pg.close()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

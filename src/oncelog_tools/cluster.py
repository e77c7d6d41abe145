"""``python -m oncelog_tools.cluster`` (``make cluster``): a PostgreSQL server and a cluster of
``oncelog broker`` processes on loopback, for trying cluster mode (issue 15, docs/CLUSTER.md).

1. PostgreSQL in a temporary directory (``oncelog.testing.pgserver``: initdb, 127.0.0.1 on a free
   port, trust on loopback only; as an unprivileged user: ``postgres`` or a dedicated one when
   run as root), and a database ``oncelog``;
2. ``--brokers`` brokers (default 3), node ids 1..N, each
   ``oncelog broker --node-id N --data-dir DIR --listen 127.0.0.1:PORT --store postgresql://…``,
   their data directories and logs under ``--dir`` (default: a new temporary directory);
3. unless ``--no-diskless``: one SeaweedFS S3 server on loopback (``oncelog.testing.seaweedfs``;
   issue 29, docs/DISKLESS.md), its bucket ``oncelog``, and every broker given
   ``diskless.storage.url`` / ``diskless.storage.endpoint`` and the AWS_* credentials, so topics
   created with ``diskless.enable=true`` work; the properties and variables are printed;
4. prints the bootstrap string and the store URL, then waits for Ctrl-C / SIGTERM (or
   ``--duration`` seconds) and stops the brokers (SIGTERM: each deregisters), SeaweedFS and
   PostgreSQL, removing their directories. Every wait is bounded.
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
    ap.add_argument("--no-diskless", action="store_true", help="no object store (diskless topics refused)")
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
    s3 = None
    env: dict[str, str] | None = None
    try:
        pg.start()
        dsn = pg.create_database("oncelog")
        if not args.no_diskless:
            from oncelog.testing.seaweedfs import SeaweedMissing, SeaweedServer

            try:
                s3 = SeaweedServer(base / "seaweedfs")
            except SeaweedMissing as exc:
                print(f"cannot start SeaweedFS for diskless topics ({exc}); --no-diskless runs without", file=sys.stderr)
                return 2
            s3.start()
            env = s3.env()
            store_props = {"diskless.storage.url": f"s3://{s3.bucket}/oncelog",
                           "diskless.storage.endpoint": s3.endpoint}
            overrides = {**store_props, **overrides}
            for k, v in store_props.items():
                print(f"broker property: {k}={v}", flush=True)
            for k, v in env.items():
                print(f"environment: {k}={v}", flush=True)
        for n in range(1, args.brokers + 1):
            b = BrokerProcess(base / f"broker{n}", node_id=n, store=dsn, overrides=overrides, env=env)
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
        if s3 is not None:
            s3.close()
        pg.close()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
